"""`make run`: every gpufleet DAG, in lifecycle order, through `airflow dags test` on the
simulated fleet; then the fleet readiness table.

Each DAG's full log goes to $AIRFLOW_HOME/run-logs/<dag_id>.log; the terminal gets one line
per DAG (and the log's tail when it fails), the validation report's summary, and the table.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Lifecycle order, with the run configuration `make run` uses for each.
LIFECYCLE: list[tuple[str, dict]] = [
    # sim-europe-west4 is the catalog's region that does not exist yet (preexisting: false)
    ("region_onboarding", {"region": "sim-europe-west4"}),
    ("reservation_transition", {}),
    ("nightly_fabric_validation", {}),
    (
        "gated_training_launch",
        {
            "cluster": "a3u-sim",
            "pools": ["h200-a"],
            "nodes": 2,
            "gpus_per_node": 8,
            "job_name": f"demo-finetune-{datetime.now(UTC):%H%M%S}",
            "namespace": "ml-demo",
            "image": "us-docker.pkg.dev/example/train/qwen-fsdp:1.0",
            "command": ["torchrun", "train.py"],
        },
    ),
]


def dag_ids() -> set[str]:
    return {p.stem for p in (ROOT / "dags").glob("*.py") if not p.name.startswith("_")}


def run_dag(dag_id: str, conf: dict, logs: Path) -> bool:
    log_file = logs / f"{dag_id}.log"
    cmd = ["airflow", "dags", "test", dag_id]
    if conf:
        cmd += ["--conf", json.dumps(conf)]
    start = time.monotonic()
    print(f"==> {dag_id}: airflow dags test{' (with conf)' if conf else ''} ...", flush=True)
    with log_file.open("w") as out:
        proc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
    text = log_file.read_text(errors="replace")
    ok = proc.returncode == 0 and "state=failed" not in text.lower().replace(" ", "")
    took = time.monotonic() - start
    print(f"    {'success' if ok else 'FAILED'} in {took:.0f} s (log: {log_file})")
    if not ok:
        tail = [ln for ln in text.splitlines() if "ERROR" in ln or "Failed" in ln][-8:]
        for line in tail:
            print(f"    | {line[:200]}")
    return ok


def main() -> int:
    home = Path(os.environ.get("AIRFLOW_HOME", ROOT / ".airflow"))
    logs = home / "run-logs"
    logs.mkdir(parents=True, exist_ok=True)
    present = dag_ids()
    print(f"gpufleet on the simulated fleet (AIRFLOW_HOME={home})")
    subprocess.run(["gpufleet", "sim", "show"], check=False)
    results = {}
    for dag_id, conf in LIFECYCLE:
        if dag_id in present:
            results[dag_id] = run_dag(dag_id, conf, logs)
    onboarding = home / "gpufleet" / "reports" / "onboarding"
    for path in sorted(onboarding.glob("*/latest/report.md")):
        print(f"\n--- region onboarding report ({path}) ---")
        print(path.read_text())
    report = home / "gpufleet" / "reports" / "latest" / "report.md"
    if report.exists():
        print(f"\n--- nightly validation report ({report.with_suffix('.html')}) ---")
        print(report.read_text())
    print()
    subprocess.run(["gpufleet", "status"], check=False)
    failed = [d for d, ok in results.items() if not ok]
    if failed:
        print(f"\n{len(failed)} DAG run(s) failed: {', '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
