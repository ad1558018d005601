"""The nightly at fleet scale on the distributed executor (issue 18): one night of
``nightly_fleet_validation`` (the planner, and the ``nightly_fabric_validation`` run per
cluster it starts) over a generated fleet of N simulated pools on a live CeleryExecutor
deployment (two workers, Redis, PostgreSQL: ``tests/live/airflow_live.py``), against DAGs of
the same shape whose tasks do nothing (a planner starting one run per cluster), run the same
way on the same deployment.

    python bench/nightly_scale.py [--pools 100[,500,...]] [--nodes 4] [--speed 0.02]
                                  [--timeout 1800]

Per point: the nightly's wall time (trigger to the run's end), the no-op DAG's, their ratio
(the orchestration overhead the nightly adds over Airflow's own cost for that many tasks; goal
1.5 or less; the nightly's run is the one Airflow schedules when the planner is unpaused, the
no-op planner's is triggered; both count every task of the planner and of its runs), the
scheduler's and triggerer's CPU seconds, the peak number of deferred tasks, and the ledger's
growth (validation and pair rows). The sim's delays are scaled by
``--speed`` (``GPUFLEET_SIM_SPEED``), so the figures are Airflow's and gpufleet's own costs,
not the simulated programs' run times. Exits 1 when a run does not succeed or a ratio is over
1.5.
Needs PostgreSQL and Redis on 127.0.0.1 (the CI machines have both).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import quote

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "plugins"), str(ROOT / "tests" / "live")]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from airflow_live import LiveAirflow, start_airflow  # noqa: E402
from fleetgen import generate_catalog  # noqa: E402

PLANNER = "nightly_fleet_validation"
CHILD = "nightly_fabric_validation"
NOOP = "bench_noop_fleet"
NOOP_CHILD = "bench_noop_cluster"
CHILDREN = {PLANNER: CHILD, NOOP: NOOP_CHILD}
GOAL = 1.5
PER_CLUSTER = 20  # pools per generated cluster: one cluster run each
POLL_S = 2  # both planners look at their runs every POLL_S seconds

# The nightly's shape with tasks that do nothing: a planner starting one run per cluster of
# {per_cluster} pools, and in each run a setup, the two target lists, three tasks mapped over
# the pools, the report and the teardown.
NOOP_DAG = """
from datetime import datetime
from airflow.providers.standard.operators.trigger_dagrun import TriggerDagRunOperator
from airflow.sdk import dag, task

@dag(dag_id="bench_noop_cluster", schedule=None, start_date=datetime(2026, 1, 1),
     catchup=False, max_active_runs=16)
def bench_noop_cluster():
    @task
    def setup():
        return None

    @task
    def targets(dag_run=None):
        return list(range(dag_run.conf["pools"]))

    @task
    def fabric(i):
        return i

    @task
    def storage(i):
        return i

    @task(trigger_rule="all_done")
    def remediate(i):
        return i

    @task(trigger_rule="all_done")
    def report():
        return None

    @task
    def teardown():
        return None

    s = setup()
    pools = targets()
    f = fabric.expand(i=pools)
    st = storage.expand(i=pools)
    r = remediate.expand(i=pools)
    s >> pools
    f >> r
    [r, st] >> report() >> teardown()

@dag(dag_id="bench_noop_fleet", schedule=None, start_date=datetime(2026, 1, 1),
     catchup=False, max_active_runs=1)
def bench_noop_fleet():
    @task
    def plan(run_id=None):
        sizes = [{per_cluster}] * ({pools} // {per_cluster}) + [{pools} % {per_cluster}]
        return [
            {"trigger_run_id": f"{run_id}--c{i}", "conf": {"pools": n}}
            for i, n in enumerate(sizes) if n
        ]

    @task(trigger_rule="all_done")
    def report():
        return None

    runs = plan()
    TriggerDagRunOperator.partial(
        task_id="validate_clusters", trigger_dag_id="bench_noop_cluster",
        wait_for_completion=True, deferrable=True, poke_interval={poll},
        openlineage_inject_parent_info=False,
    ).expand_kwargs(runs) >> report()

bench_noop_cluster()
bench_noop_fleet()
"""


def cpu_seconds(live: LiveAirflow, name: str) -> float:
    """User + system CPU seconds of a component's process and its children that were waited
    for (from /proc)."""
    proc = live.processes.get(name)
    if proc is None:
        return 0.0
    try:
        fields = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    ticks = sum(int(fields[i]) for i in (11, 12, 13, 14))  # utime stime cutime cstime
    return ticks / os.sysconf("SC_CLK_TCK")


def _child_runs(live: LiveAirflow, dag_id: str, run_id: str) -> list[str]:
    runs = live.request(
        "GET", f"/api/v2/dags/{CHILDREN[dag_id]}/dagRuns", params={"limit": 1000}
    ).json()["dag_runs"]
    return [r["dag_run_id"] for r in runs if r["dag_run_id"].startswith(run_id + "--")]


def _tasks(live: LiveAirflow, dag_id: str, run_id: str) -> int:
    return live.request(
        "GET",
        f"/api/v2/dags/{dag_id}/dagRuns/{quote(run_id, safe='')}/taskInstances",
        params={"limit": 1},
    ).json()["total_entries"]


def run_once(live: LiveAirflow, dag_id: str, timeout: float) -> dict:
    """One night of the planner ``dag_id``, from the moment it is asked for to its end: the
    real planner's own scheduled run (unpausing it creates the latest night's run, as in
    production), the no-op one triggered."""
    cpu0 = {n: cpu_seconds(live, n) for n in ("scheduler", "triggerer")}
    began = time.monotonic()
    live.unpause(CHILDREN[dag_id])
    live.unpause(dag_id)
    if dag_id == PLANNER:
        run_id = None
        while run_id is None and time.monotonic() - began < 120:
            runs = live.request("GET", f"/api/v2/dags/{dag_id}/dagRuns").json()["dag_runs"]
            run_id = runs[0]["dag_run_id"] if runs else None
            time.sleep(0.5)
        if run_id is None:
            raise SystemExit("the nightly's scheduled run did not appear within 120 s")
    else:
        run_id = f"bench-{dag_id}-{int(time.time())}"
        response = live.request(
            "POST",
            f"/api/v2/dags/{dag_id}/dagRuns",
            json={"dag_run_id": run_id, "logical_date": None, "conf": {}},
        )
        response.raise_for_status()
    peak_deferred, state = 0, "queued"
    while time.monotonic() - began < timeout:
        live.check_alive()
        quoted = quote(run_id, safe="")
        state = live.request("GET", f"/api/v2/dags/{dag_id}/dagRuns/{quoted}").json()["state"]
        deferred = live.request(
            "GET",
            "/api/v2/dags/~/dagRuns/~/taskInstances",
            params={"state": "deferred", "limit": 1},
        ).json()
        peak_deferred = max(peak_deferred, int(deferred.get("total_entries") or 0))
        if state in ("success", "failed"):
            break
        time.sleep(2)
    wall = time.monotonic() - began
    children = _child_runs(live, dag_id, run_id)
    tasks = _tasks(live, dag_id, run_id) + sum(_tasks(live, CHILDREN[dag_id], c) for c in children)
    return {
        "run_id": run_id,
        "state": state,
        "wall_s": wall,
        "tasks": tasks,
        "runs": 1 + len(children),
        "peak_deferred": peak_deferred,
        "cpu": {n: cpu_seconds(live, n) - cpu0[n] for n in cpu0},
    }


def ledger_rows(url: str) -> dict[str, int]:
    from sqlalchemy import create_engine, text

    engine = create_engine(url)
    with engine.connect() as conn:
        out = {
            t: conn.execute(text(f"SELECT count(*) FROM {t}")).scalar()
            for t in ("gf_validations", "gf_validation_pairs", "gf_node_snapshots")
        }
    engine.dispose()
    return out


def point(pools: int, nodes: int, speed: float, timeout: float) -> dict:
    work = Path(tempfile.mkdtemp(prefix=f"gpufleet-scale-{pools}-"))
    catalog = work / "fleet"
    generate_catalog(catalog, pools, per_cluster=PER_CLUSTER)
    text = (catalog / "fleet.yaml").read_text().replace("nodes: 16", f"nodes: {nodes}")
    (catalog / "fleet.yaml").write_text(text)
    dags = work / "dags"
    dags.mkdir()
    for dag_id in (PLANNER, CHILD):
        (dags / f"{dag_id}.py").symlink_to(ROOT / "dags" / f"{dag_id}.py")
    noop = NOOP_DAG.replace("{pools}", str(pools)).replace("{per_cluster}", str(PER_CLUSTER))
    (dags / f"{NOOP}.py").write_text(noop.replace("{poll}", str(POLL_S)))
    live = start_airflow(
        dags,
        extra_env={
            "GPUFLEET_CATALOG_DIR": str(catalog),
            "GPUFLEET_STATE_DIR": str(work / "state"),
            "GPUFLEET_SIM_SPEED": str(speed),
            "AIRFLOW__CORE__PARALLELISM": "32",
            "AIRFLOW__CORE__MAX_ACTIVE_TASKS_PER_DAG": "32",
            "AIRFLOW__GPUFLEET__RUN_POLL_SECONDS": str(POLL_S),
        },
        unpause=False,
    )
    try:
        if live.executor != "CeleryExecutor":
            raise SystemExit("bench/nightly_scale.py needs PostgreSQL and Redis (CeleryExecutor)")
        noop = run_once(live, NOOP, timeout)
        nightly = run_once(live, PLANNER, timeout)
        rows = ledger_rows(live.env["GPUFLEET_LEDGER_URL"])
    finally:
        live.stop()
    return {"pools": pools, "noop": noop, "nightly": nightly, "ledger": rows}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pools", default="100")
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--speed", type=float, default=0.02)
    parser.add_argument("--timeout", type=float, default=1800)
    args = parser.parse_args()
    # stopped (SIGTERM): leave through the finally that stops the deployment's processes
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    worst = 0.0
    failed = False
    print(
        f"{'pools':>6} {'dag':<8} {'state':<8} {'runs':>5} {'tasks':>6} {'wall s':>8} {'ratio':>6} "
        f"{'sched cpu':>9} {'trig cpu':>8} {'deferred':>8}"
    )
    for n in (int(p) for p in args.pools.split(",")):
        result = point(n, args.nodes, args.speed, args.timeout)
        ratio = result["nightly"]["wall_s"] / result["noop"]["wall_s"]
        worst = max(worst, ratio)
        for label in ("noop", "nightly"):
            r = result[label]
            failed |= r["state"] != "success"
            print(
                f"{n:>6} {label:<8} {r['state']:<8} {r['runs']:>5} {r['tasks']:>6} "
                f"{r['wall_s']:>8.1f} "
                f"{(ratio if label == 'nightly' else 1.0):>6.2f} {r['cpu']['scheduler']:>9.1f} "
                f"{r['cpu']['triggerer']:>8.1f} {r['peak_deferred']:>8}"
            )
        print(f"{n:>6} ledger rows after one night: {result['ledger']}")
    print(f"worst overhead ratio {worst:.2f} (goal {GOAL}): {'OK' if worst <= GOAL else 'OVER'}")
    return 0 if worst <= GOAL and not failed else 1


if __name__ == "__main__":
    sys.exit(main())
