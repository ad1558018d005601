"""DAG parse time with a 2,000-pool catalog, against a trivial one-task DAG, in one run.

How Airflow 3.3's dag-processor parses a file: the parent pre-imports the ``airflow.*``
modules the file imports (``_pre_import_airflow_modules``) and forks a child, which runs
``_parse_file``: the stability check, a DagBag of that one file (executing it) and the
serialization of its DAGs. This benchmark calls those same functions: for each file the parent
pre-imports, then forks ``--repeat`` children that each run ``_parse_file`` once and report
their wall time. Medians are compared with the trivial DAG's. The catalog index cache is
warmed first (the dag-processor re-parses every file every 30 s, so the warm figure is what it
pays); the cold (first-parse) figure is printed too.

    python -m bench.parse_time [--pools 2000] [--repeat 9] [--clock wall|cpu]

``--clock cpu`` times each parse by the child's own CPU time instead of the wall clock: on a
machine other sessions load, wall times swing by 2x between runs, CPU times far less.

Exits 1 when a DAG file's warm median is more than --limit (2.0) times the trivial DAG's.
"""

from __future__ import annotations

import argparse
import compileall
import gc
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench.fleetgen import generate_catalog

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


def time_in_child(path: Path, clock=time.perf_counter) -> float:
    """Fork; the child parses the file as the dag-processor does and reports its time on
    ``clock`` (wall: ``time.perf_counter``; CPU: ``time.process_time``)."""
    import structlog
    from airflow.dag_processing.processor import DagFileParseRequest, _parse_file

    log = structlog.get_logger("bench")
    request = DagFileParseRequest(file=str(path), bundle_path=path.parent, bundle_name="bench")
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        os.close(read_fd)
        start = clock()
        code = 0
        try:
            result = _parse_file(request, log)
            if result is None or result.import_errors or not result.serialized_dags:
                raise RuntimeError(f"not parsed: {result and result.import_errors}")
        except BaseException as exc:  # noqa: BLE001
            os.write(2, f"{path.name}: {exc!r}\n".encode())
            code = 1
        os.write(write_fd, f"{clock() - start:.6f}".encode())
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
    parser.add_argument(
        "--clock",
        choices=("wall", "cpu"),
        default="wall",
        help="wall time (the dag-processor's latency), or the parsing process's own CPU time: "
        "steadier on a machine other work shares (a load spike stretches wall time, not CPU)",
    )
    args = parser.parse_args()
    clock = time.perf_counter if args.clock == "wall" else time.process_time

    work = Path(tempfile.mkdtemp(prefix="gpufleet-bench-parse-"))
    try:
        generate_catalog(work / "fleet", args.pools)
        trivial = work / "trivial_dag.py"
        trivial.write_text(TRIVIAL)
        os.environ.update(
            {"GPUFLEET_CATALOG_DIR": str(work / "fleet"), "GPUFLEET_STATE_DIR": str(work / "state")}
        )
        # the plugins folder on sys.path, as Airflow puts it in the dag-processor
        sys.path.insert(0, str(ROOT / "plugins"))
        # A deployment has bytecode for its packages (pip compiles at install; this machine
        # sets PYTHONDONTWRITEBYTECODE, which would recompile gpufleet in every child).
        compileall.compile_dir(str(ROOT / "plugins" / "gpufleet"), quiet=1)
        # what the dag-processor's manager process has loaded before it forks a parser
        import airflow.sdk  # noqa: F401
        import airflow.serialization.serialized_objects  # noqa: F401
        import structlog
        from airflow.dag_processing.dagbag import DagBag  # noqa: F401
        from airflow.dag_processing.processor import _pre_import_airflow_modules

        from gpufleet.config.catalog import load_catalog

        n_pools = sum(1 for _ in load_catalog(work / "fleet").pools())
        from gpufleet.config import catalog as catalog_module

        catalog_module._loaded.clear()  # the children must not inherit a parsed catalog
        files = [trivial, *sorted((ROOT / "dags").glob("*.py"))]
        for f in files:  # in steady state the manager has pre-imported every file's imports
            _pre_import_airflow_modules(str(f), structlog.get_logger("bench"))
        gc.collect()
        gc.freeze()  # as the dag-processor manager does before its parse loop
        cold = {f.name: time_in_child(f, clock) for f in files[1:2]}  # first parse builds the index
        for f in files:  # warm-up
            time_in_child(f, clock)
        times: dict[str, list[float]] = {f.name: [] for f in files}
        for _ in range(args.repeat):  # interleaved, so load spikes hit every file alike
            for f in files:
                times[f.name].append(time_in_child(f, clock))
        results = {name: statistics.median(values) for name, values in times.items()}
        base = results[trivial.name]
        print(
            f"catalog: {n_pools} node pools; medians of {args.repeat} forked parses "
            f"(Airflow's _parse_file: import + serialize), {args.clock} time"
        )
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
