"""`make run`: the whole story on the simulated fleet, one act after another, each visible.

1. onboard `sim-europe-west4`, the region that does not exist yet;
2. the nightly validation of every pool;
3. a training launch onto `a3u-sim/h200-a`, confirmed on RDMA;
4. a fault: `a3u-sim/h200-b`'s fabric falls back to TCP sockets;
5. the next nightly flags it (the run fails, naming the pool and why);
6. the gate refuses a launch onto h200-b, naming why, while a launch onto h200-a is confirmed;
7. a reservation transition moves h200-b's work to h200-c (a new reservation), validated first;
8. the readiness table: every pool in service ready, h200-b retired.

Each DAG runs through `airflow dags test` (its full log in $AIRFLOW_HOME/run-logs/); the
simulated fleet and its default SQLite ledger start fresh, so the story is the same every time.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _launch(pool: str, name: str) -> dict:
    return {
        "cluster": "a3u-sim",
        "pools": [pool],
        "nodes": 2,
        "gpus_per_node": 8,
        "job_name": f"{name}-{datetime.now(UTC):%H%M%S}",
        "namespace": "ml-demo",
        "image": "us-docker.pkg.dev/example/train/qwen-fsdp:1.0",
        "command": ["torchrun", "train.py"],
    }


# (title, DAG id or a gpufleet CLI command, conf, expected outcome, log lines worth showing)
STORY: list[tuple[str, str | list[str], dict, str, str]] = [
    (
        "onboard a region that does not exist yet",
        "region_onboarding",
        {"region": "sim-europe-west4"},
        "success",
        r"Region state",
    ),
    (
        "nightly validation of every pool",
        "nightly_fabric_validation",
        {},
        "success",
        r"^\| (a3u|p5)[^|]*\| (PASS|FAIL|ERROR) \| [a-z-]+ \(",
    ),
    (
        "launch a training job onto a3u-sim/h200-a",
        "gated_training_launch",
        _launch("h200-a", "demo-finetune"),
        "success",
        r"gate: .*chosen|every rank of .* runs on",
    ),
    (
        "fault: a3u-sim/h200-b's RDMA fabric goes down (NCCL falls back to sockets)",
        ["gpufleet", "sim", "inject", "--pool", "a3u-sim/h200-b", "--fault", "fabric-down"],
        {},
        "success",
        r".",
    ),
    (
        "the next nightly flags h200-b",
        "nightly_fabric_validation",
        {},
        "failed",
        r"^airflow.*failed fabric validation",
    ),
    (
        "the gate refuses a launch onto h200-b, naming why",
        "gated_training_launch",
        _launch("h200-b", "refused-job"),
        "failed",
        r"^airflow.*refused; nothing was submitted",
    ),
    (
        "a launch onto healthy h200-a is confirmed",
        "gated_training_launch",
        _launch("h200-a", "healthy-job"),
        "success",
        r"gate: .*chosen|every rank of .* runs on",
    ),
    (
        "transition h200-b's work to h200-c on reservation res-a3u-c",
        "reservation_transition",
        {"cluster": "a3u-sim", "old_pool": "h200-b", "new_pool": "h200-c", "soak_minutes": 0.05},
        "success",
        r"passed validation|Kueue admits|retired|commit this catalog change",
    ),
]


# the DAGs whose approval task (docs/remediation.md#approvals) the story answers as a person
# would, on the metadata DB `airflow dags test` shares (tests/support/hitl.py: what the REST
# endpoint does)
APPROVES = {"reservation_transition"}
APPROVE = "from tests.support.hitl import Answer; Answer('Approve', 'make-run')()"


def dag_ids() -> set[str]:
    return {p.stem for p in (ROOT / "dags").glob("*.py") if not p.name.startswith("_")}


def run_dag(dag_id: str, conf: dict, logs: Path, expect: str, show: str) -> bool:
    """Run one DAG; True when it ended as the story expects. Prints the log lines matching
    ``show`` (the act's evidence) and, on a surprise, the errors."""
    log_file = logs / f"{dag_id}-{time.strftime('%H%M%S')}.log"
    cmd = ["airflow", "dags", "test", dag_id]
    if conf:
        cmd += ["--conf", json.dumps(conf)]
    start = time.monotonic()
    with log_file.open("w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
        while proc.poll() is None:  # an approval task waits for a person: the story approves
            time.sleep(2)
            if dag_id in APPROVES:
                subprocess.run([sys.executable, "-c", APPROVE], cwd=ROOT, capture_output=True)
    text = log_file.read_text(errors="replace")
    failed = proc.returncode != 0 or "state=failed" in text.lower().replace(" ", "")
    ok = failed == (expect == "failed")
    took = time.monotonic() - start
    verdict = "failed" if failed else "success"
    note = "as expected" if ok else f"UNEXPECTED (expected {expect})"
    print(f"    {verdict} in {took:.0f} s, {note} (log: {log_file})")
    pattern = re.compile(show)
    seen: list[str] = []
    for line in text.splitlines():
        m = re.search(r"\] (.*?) \[", line) or re.search(r"(?:INFO|ERROR)\s+(.*)", line)
        message = (m.group(1) if m else line).strip()
        if pattern.search(line) and message not in seen and "Task failed" not in message:
            seen.append(message)
    for message in seen[-6:]:
        print(f"    | {message[:220]}")
    if not ok:
        tail = [ln for ln in text.splitlines() if "ERROR" in ln or "Failed" in ln][-8:]
        for line in tail:
            print(f"    ! {line[:200]}")
    return ok


def stage_breakdown(home: Path) -> None:
    """Where the last nightly's GPU time went (``domain.stages``), and its nightly tier, from
    the ledger's rows of its run (``services.views.cost.cost_breakdown``)."""
    from gpufleet.config.catalog import load_catalog
    from gpufleet.domain.verdicts import latest_per_check
    from gpufleet.services.views.cost import cost_breakdown
    from gpufleet.store import Ledger

    report = home / "gpufleet" / "reports" / "latest" / "report.md"
    if not report.exists():
        return
    head = report.read_text().splitlines()[0]
    run_id = head.rsplit(": ", 1)[-1].strip()
    ledger = Ledger()
    rows = latest_per_check(ledger.validations_for_run(run_id))
    for line in cost_breakdown(rows, load_catalog(), ledger):
        print(f"    {line}")


def fresh_fleet(home: Path) -> None:
    """The simulated fleet (its preexisting clusters onboarded), and the default SQLite ledger
    when no other is configured."""
    # the clusters that exist before the story were onboarded by gpufleet earlier: their nodes
    # hold the validation images (region_onboarding's pre-pull DaemonSet); the new region's
    # cluster gets it from its own onboarding in act 1
    subprocess.run(["gpufleet", "sim", "reset", "--onboarded"], check=False, capture_output=True)
    if not (
        os.environ.get("GPUFLEET_LEDGER_URL") or os.environ.get("AIRFLOW_CONN_GPUFLEET_LEDGER")
    ):
        for suffix in ("", "-wal", "-shm"):
            (home / "gpufleet" / f"ledger.db{suffix}").unlink(missing_ok=True)
    shutil.rmtree(home / "gpufleet" / "reports", ignore_errors=True)
    # the ledger is created by its one setup step, never by the first task that opens it
    init = subprocess.run(["gpufleet", "ledger", "init"], capture_output=True, text=True)
    print(f"    {(init.stdout or init.stderr).strip()}")
    if init.returncode != 0:
        raise SystemExit(init.returncode)


def main() -> int:
    home = Path(os.environ.get("AIRFLOW_HOME", ROOT / ".airflow"))
    logs = home / "run-logs"
    logs.mkdir(parents=True, exist_ok=True)
    present = dag_ids()
    print(f"gpufleet on the simulated fleet (AIRFLOW_HOME={home}); a fresh fleet and ledger")
    fresh_fleet(home)
    surprises = []
    for act, (title, what, conf, expect, show) in enumerate(STORY, start=1):
        print(f"\n==> {act}. {title}", flush=True)
        if isinstance(what, list):
            proc = subprocess.run(what, capture_output=True, text=True, cwd=ROOT)
            print(f"    $ {' '.join(what)}\n    | {proc.stdout.strip() or proc.stderr.strip()}")
            if proc.returncode != 0:
                surprises.append(title)
            continue
        if what not in present:
            print(f"    (no DAG {what} in dags/: skipped)")
            continue
        if not run_dag(what, conf, logs, expect, show):
            surprises.append(title)
        if what == "nightly_fabric_validation":
            stage_breakdown(home)
    report = home / "gpufleet" / "reports" / "latest" / "report.md"
    if report.exists():
        print(f"\n--- the last nightly validation report ({report.with_suffix('.html')}) ---")
        print(report.read_text())
    print()
    subprocess.run(["gpufleet", "status"], check=False)
    if surprises:
        print(f"\n{len(surprises)} act(s) did not go as the story expects: {'; '.join(surprises)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
