"""DAG parse time with a 2,000-pool catalog, against a trivial one-task DAG, in one run.

How the dag-processor parses: a parent with Airflow imported forks a child per DAG file, and
the child executes the file. This benchmark does the same: the parent imports
``airflow.sdk`` and the DagBag machinery, then for each file forks ``--repeat`` children that
each execute the file once and report their wall time. Medians are compared with the trivial
DAG's. The catalog index cache is warmed first (the dag-processor re-parses every file every
30 s, so the warm figure is what it pays), and the cold (first-parse) figure is printed too.

    python bench/parse_time.py [--pools 2000] [--repeat 9]

Exits 1 when a DAG file's warm median is more than --limit (2.0) times the trivial DAG's.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
TRIVIAL = """
from datetime import datetime
from airflow.sdk import dag
from airflow.providers.standard.operators.empty import EmptyOperator

@dag(dag_id="trivial", schedule=None, start_date=datetime(2026, 1, 1), catchup=False)
def trivial():
    EmptyOperator(task_id="only")

trivial()
"""


def generate_catalog(folder: Path, pools: int) -> None:
    """``pools`` node pools: 20 regions x N clusters x 10 pools, sim clusters mimicking GKE."""
    per_cluster = 10
    clusters = max(pools // per_cluster, 1)
    regions = []
    for r in range(20):
        region = {"name": f"region-{r:02d}", "reservations": [], "clusters": []}
        for c in range(r, clusters, 20):
            cluster = {
                "name": f"cluster-{c:04d}",
                "provider": "sim",
                "sim": {"mimics": "gke"},
                "project": "bench",
                "location": "us-central1-b",
                "network": {
                    "name": f"net-{c:04d}",
                    "rdma_nics": 8,
                    "subnets": [{"name": f"rdma-{i}", "cidr": f"10.{i}.0.0/24"} for i in range(8)],
                },
                "node_pools": [],
                "filesystems": [
                    {
                        "name": "lustre",
                        "kind": "managed-lustre",
                        "capacity_tib": 18,
                        "throughput_mbps_per_tib": 1000,
                    }
                ],
            }
            for p in range(per_cluster):
                res = f"res-{c:04d}-{p}"
                region["reservations"].append(
                    {"name": res, "machine_type": "a3-ultragpu-8g", "count": 16}
                )
                cluster["node_pools"].append(
                    {
                        "name": f"pool-{p}",
                        "machine_type": "a3-ultragpu-8g",
                        "gpu": {"model": "H200", "count": 8},
                        "nodes": 16,
                        "reservation": {"name": res},
                        "transport": "gib",
                        "filesystem": "lustre",
                    }
                )
            region["clusters"].append(cluster)
        if region["clusters"]:
            regions.append(region)
    (folder / "fleet.yaml").write_text(yaml.safe_dump({"regions": regions}, sort_keys=False))


def time_in_child(path: Path) -> float:
    """Fork; the child executes the DAG file and writes its wall time to a pipe."""
    import runpy

    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        os.close(read_fd)
        start = time.perf_counter()
        code = 0
        try:
            runpy.run_path(str(path), run_name="bench_dag")
        except BaseException as exc:  # noqa: BLE001
            os.write(2, f"{path.name}: {exc!r}\n".encode())
            code = 1
        os.write(write_fd, f"{time.perf_counter() - start:.6f}".encode())
        os._exit(code)
    os.close(write_fd)
    with os.fdopen(read_fd) as pipe:
        elapsed = float(pipe.read() or "nan")
    _, status = os.waitpid(pid, 0)
    if status:
        raise SystemExit(f"{path.name} failed to import")
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pools", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument("--limit", type=float, default=2.0)
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="gpufleet-bench-parse-"))
    try:
        (work / "fleet").mkdir()
        generate_catalog(work / "fleet", args.pools)
        trivial = work / "trivial_dag.py"
        trivial.write_text(TRIVIAL)
        os.environ.update(
            {"GPUFLEET_CATALOG_DIR": str(work / "fleet"), "GPUFLEET_STATE_DIR": str(work / "state")}
        )
        sys.path.insert(0, str(ROOT / "plugins"))
        import airflow.sdk  # noqa: F401 - what the dag-processor parent already has
        from airflow.dag_processing.dagbag import DagBag  # noqa: F401

        from gpufleet.catalog import load_catalog

        n_pools = sum(1 for _ in load_catalog(work / "fleet").pools())
        files = [trivial, *sorted((ROOT / "dags").glob("*.py"))]
        cold = {f.name: time_in_child(f) for f in files[1:2]}  # first parse builds the index
        results = {}
        for f in files:
            times = [time_in_child(f) for _ in range(args.repeat)]
            results[f.name] = statistics.median(times)
        base = results[trivial.name]
        print(f"catalog: {n_pools} node pools; medians of {args.repeat} forked parses")
        print(f"{'DAG file':<34} {'median ms':>10} {'x trivial':>10}")
        worst = 0.0
        for name, value in results.items():
            ratio = value / base
            if name != trivial.name:
                worst = max(worst, ratio)
            print(f"{name:<34} {value * 1000:>10.1f} {ratio:>10.2f}")
        for name, value in cold.items():
            print(f"{name + ' (cold index)':<34} {value * 1000:>10.1f} {value / base:>10.2f}")
        print(
            f"worst ratio {worst:.2f} (limit {args.limit:.1f}): "
            f"{'OK' if worst <= args.limit else 'OVER'}"
        )
        return 0 if worst <= args.limit else 1
    finally:
        if not os.environ.get("KEEP_BENCH"):
            shutil.rmtree(work, ignore_errors=True)
        else:
            print("kept", work)


if __name__ == "__main__":
    sys.exit(main())
