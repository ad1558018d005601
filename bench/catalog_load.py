"""What a task process pays to load the fleet catalog (every Airflow task runs in a new
process, and most load it): the YAML read every time, against its data kept as JSON in the
state folder (``config.catalog``), in one run, at each size.

    python -m bench.catalog_load [--pools 500,2000] [--repeat 5]

Each load is a new process's first (``load_catalog``'s in-process copy cleared), timed on the
process's CPU clock; medians. Exits 1 when the kept JSON is not at least 3 times faster.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench.fleetgen import generate_catalog

LIMIT = 3.0  # the kept JSON's speed-up that must hold


def load_seconds(folder: Path, state: Path, repeat: int, keep: bool) -> float:
    """Median CPU seconds of a fresh ``load_catalog(folder)``; ``keep``: with the JSON kept
    from the first (untimed) load, else with the state folder emptied before each."""
    import shutil

    from gpufleet.config import catalog

    os.environ["GPUFLEET_STATE_DIR"] = str(state)
    times = []
    for i in range(repeat + 1):
        if not keep:
            shutil.rmtree(state, ignore_errors=True)
        catalog._loaded.clear()
        start = time.process_time()
        catalog.load_catalog(folder)
        if keep and i == 0:
            continue  # the first read writes the JSON
        times.append(time.process_time() - start)
    return statistics.median(times[-repeat:])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pools", default="500,2000")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    worst = float("inf")
    for pools in (int(p) for p in args.pools.split(",")):
        work = Path(tempfile.mkdtemp(prefix=f"gpufleet-catalog-{pools}-"))
        generate_catalog(work / "fleet", pools, per_cluster=20)
        size = (work / "fleet" / "fleet.yaml").stat().st_size
        yaml_s = load_seconds(work / "fleet", work / "state", args.repeat, keep=False)
        json_s = load_seconds(work / "fleet", work / "state", args.repeat, keep=True)
        worst = min(worst, yaml_s / json_s)
        print(
            f"{pools} pools ({size / 1e6:.2f} MB of YAML): YAML each time {yaml_s * 1000:.0f} ms, "
            f"kept JSON {json_s * 1000:.0f} ms, {yaml_s / json_s:.1f}x faster"
        )
    return 0 if worst >= LIMIT else 1


if __name__ == "__main__":
    sys.exit(main())
