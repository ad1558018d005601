"""Gate decision latency: a 16-pool job over a ledger holding a year of nightly history for
2,000 pools, against the same decision over a ledger holding only tonight's records.

Both ledgers answer LAUNCH for the same request (the 16 target pools have fresh, passing fabric
and storage validations). The full ledger adds 365 nights x 2,000 pools x 2 kinds
(fabric, storage) = 1.46 M validation rows, one pool-state row per pool and 365 x 2,000 pool
events. Each decision is the whole ``check_gate``: facts from the ledger, free nodes from the
simulated cluster, the policy, and the decision recorded in the ledger.

    python -m bench.gate_latency [--decisions 300] [--nights 365] [--pools 2000]
                                 [--backends sqlite,postgres]

PostgreSQL is used when 127.0.0.1:5432 answers (a throwaway database per ledger). Exits 1 when
p99 on the full ledger is more than --limit (2.0) times p99 on the small one.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bench.fleetgen import generate_catalog

ROOT = Path(__file__).resolve().parents[1]


CLUSTER = "cluster-0000"
TARGETS = [f"pool-{i}" for i in range(16)]
BATCH = 20_000


def _postgres_up() -> bool:
    try:
        with socket.create_connection(("127.0.0.1", 5432), timeout=1):
            return True
    except OSError:
        return False


def _pg_admin(sql: str) -> None:
    import psycopg2

    conn = psycopg2.connect(host="127.0.0.1", user="postgres", dbname="postgres")
    conn.autocommit = True
    conn.cursor().execute(sql)
    conn.close()


def fill(ledger, catalog, nights: int, now: datetime) -> int:
    """Tonight's passing records for every pool (and, with nights > 1, a history)."""
    from sqlalchemy import insert

    from gpufleet.store import schema as s

    refs = list(catalog.pools())
    rows = 0
    with ledger.engine.begin() as conn:
        conn.execute(
            insert(s.pool_state),
            [
                {
                    "cluster": r.cluster.name,
                    "pool": r.pool.name,
                    "state": "validated",
                    "reason": "bench",
                    "updated_at": now,
                }
                for r in refs
            ],
        )
    batch: list[dict] = []
    events: list[dict] = []

    def flush() -> None:
        with ledger.engine.begin() as conn:
            if batch:
                conn.execute(insert(s.validations), batch)
            if events:
                conn.execute(insert(s.pool_events), events)
        batch.clear()
        events.clear()

    for night in range(nights - 1, -1, -1):
        at = now - timedelta(days=night, minutes=30)
        for r in refs:
            common = {
                "run_id": f"scheduled__{at:%Y-%m-%d}",
                "cluster": r.cluster.name,
                "pool": r.pool.name,
                "passed": True,
                "verdict": "pass",
                "reasons": ["bench"],
                "details": {},
                "started_at": at - timedelta(minutes=20),
                "finished_at": at,
                **dict.fromkeys(
                    (
                        "expected_transport",
                        "transport",
                        "busbw_gbps",
                        "baseline_gbps",
                        "read_mb_s",
                        "write_mb_s",
                        "expected_mb_s",
                    )
                ),
            }
            batch.append(
                {
                    **common,
                    "kind": "fabric",
                    "expected_transport": "gib",
                    "transport": "gib",
                    "busbw_gbps": 352.0,
                    "baseline_gbps": 355.0,
                    "nodes_tested": 16,
                }
            )
            batch.append(
                {
                    **common,
                    "kind": "storage",
                    "read_mb_s": 19000.0,
                    "write_mb_s": 18000.0,
                    "expected_mb_s": 18000.0,
                    "nodes_tested": 4,
                }
            )
            if nights > 1:
                events.append(
                    {
                        "cluster": r.cluster.name,
                        "pool": r.pool.name,
                        "state": "validated",
                        "reason": "bench",
                        "at": at,
                    }
                )
            if len(batch) >= BATCH:
                rows += len(batch)
                flush()
    rows += len(batch)
    flush()
    return rows


def measure(ledger_url: str, catalog, decisions: int) -> list[float]:
    from gpufleet.services.launch.gate import check_gate
    from gpufleet.store import Ledger

    def factory():
        return Ledger(ledger_url)

    for _ in range(10):  # warm-up: engine, sim seeding, caches
        check_gate(catalog, factory, CLUSTER, TARGETS, 16)
    times = []
    for _ in range(decisions):
        start = time.perf_counter()
        decision = check_gate(catalog, factory, CLUSTER, TARGETS, 16)
        times.append(time.perf_counter() - start)
        assert decision.launch, decision.reasons
    return times


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--decisions", type=int, default=300)
    parser.add_argument("--nights", type=int, default=365)
    parser.add_argument("--pools", type=int, default=2000)
    parser.add_argument("--backends", default="sqlite,postgres")
    parser.add_argument("--limit", type=float, default=2.0)
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="gpufleet-bench-gate-"))
    os.environ["GPUFLEET_CATALOG_DIR"] = str(work / "fleet")
    os.environ["GPUFLEET_STATE_DIR"] = str(work / "state")
    generate_catalog(work / "fleet", args.pools, per_cluster=20)
    from gpufleet.config.catalog import load_catalog
    from gpufleet.store import Ledger

    catalog = load_catalog()
    now = datetime.now(UTC)
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    if "postgres" in backends and not _postgres_up():
        print("PostgreSQL does not answer at 127.0.0.1:5432: skipping it")
        backends.remove("postgres")
    worst = 0.0
    dropped: list[str] = []
    print(
        f"catalog {sum(1 for _ in catalog.pools())} pools; job on {len(TARGETS)} pools of "
        f"{CLUSTER}; {args.decisions} decisions each"
    )
    print(
        f"{'backend':<10} {'ledger':<8} {'rows':>10} {'fill s':>7} {'p50 ms':>8} "
        f"{'p99 ms':>8} {'mean ms':>8}"
    )
    try:
        for backend in backends:
            p99 = {}
            for label, nights in (("tonight", 1), ("year", args.nights)):
                if backend == "sqlite":
                    url = f"sqlite:///{work / f'{label}.db'}"
                else:
                    name = f"gpufleet_bench_{uuid.uuid4().hex[:8]}"
                    _pg_admin(f'CREATE DATABASE "{name}"')
                    dropped.append(name)
                    url = f"postgresql+psycopg2://postgres@127.0.0.1:5432/{name}"
                began = time.perf_counter()
                ledger = Ledger(url)
                rows = fill(ledger, catalog, nights, now)
                if backend == "postgres":
                    with ledger.engine.begin() as conn:
                        conn.exec_driver_sql("ANALYZE")
                took = time.perf_counter() - began
                times = measure(url, catalog, args.decisions)
                p99[label] = pct(times, 0.99)
                print(
                    f"{backend:<10} {label:<8} {rows:>10,} {took:>7.1f} "
                    f"{pct(times, 0.5) * 1e3:>8.2f} {p99[label] * 1e3:>8.2f} "
                    f"{statistics.fmean(times) * 1e3:>8.2f}"
                )
                ledger.engine.dispose()
            ratio = p99["year"] / p99["tonight"]
            worst = max(worst, ratio)
            print(f"{backend:<10} p99 ratio year/tonight: {ratio:.2f}")
    finally:
        for name in dropped:
            _pg_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        shutil.rmtree(work, ignore_errors=True)
    print(
        f"worst p99 ratio {worst:.2f} (limit {args.limit:.1f}): "
        f"{'OK' if worst <= args.limit else 'OVER'}"
    )
    return 0 if worst <= args.limit else 1


if __name__ == "__main__":
    sys.exit(main())
