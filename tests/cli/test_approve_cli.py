"""``gpufleet approve`` before any HTTP call, and the approvals in ``gpufleet status``
(docs/remediation.md#approvals, docs/ci-trigger.md#approving-from-ci). The answer through a
live Airflow's REST API is ``tests/live/test_approval_live.py``. The CLI in a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys

from gpufleet.store import Ledger
from tests.support.fleet import named_ledger_env

CLI = [sys.executable, "-c", "import sys; from gpufleet.cli import main; sys.exit(main())"]


def gpufleet(*args, **env):
    base = {k: v for k, v in os.environ.items() if not k.startswith("GPUFLEET_AIRFLOW_")}
    return subprocess.run(
        [*CLI, *args], capture_output=True, text=True, env={**base, **named_ledger_env(), **env}
    )


def test_status_lists_the_pending_and_the_answered_approvals(fleet_state):
    ledger = Ledger()
    waiting, _ = ledger.request_approval(
        "report_subblock", "a3u-sim/h200-a/block-1/block-1-sb2", "Report it?", requested_by="n1"
    )
    answered, _ = ledger.request_approval(
        "retire_pool", "a3u-sim/h200-b", "Retire it?", requested_by="r1"
    )
    ledger.approval_asked_by(answered["id"], "reservation_transition", "r1", "approve_retire")
    ledger.answer_approval(answered["id"], ["Reject"], "bob")
    shown = gpufleet("status", "--launches", "0")
    assert shown.returncode == 0, shown.stderr
    assert "approvals (waiting for a person, or answered in the last day):" in shown.stdout
    assert (
        f"#{waiting['id']} report_subblock a3u-sim/h200-a/block-1/block-1-sb2: waiting for a "
        "person (not asked yet: remediation_approvals asks it)"
    ) in shown.stdout
    assert f"#{answered['id']} retire_pool a3u-sim/h200-b: rejected by bob at " in shown.stdout


def test_approve_without_a_password_is_refused_before_any_call(fleet_state):
    refused = gpufleet("approve", "reservation_transition", "r1", "approve_retire")
    assert refused.returncode == 2
    assert "no password for Airflow user 'admin'" in refused.stderr


def test_approve_against_no_airflow_says_so(fleet_state):
    refused = gpufleet(
        "approve",
        "reservation_transition",
        "r1",
        "approve_retire",
        "--url",
        "http://127.0.0.1:9",
        GPUFLEET_AIRFLOW_PASSWORD="x",
    )
    assert refused.returncode == 2
    assert "cannot reach Airflow at http://127.0.0.1:9" in refused.stderr
