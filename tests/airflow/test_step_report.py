"""One step report, told one way: ``report_step`` logs each note under the step (or the prefix
given) and sends each alert and page, for every kind of step report the services return."""

from __future__ import annotations

import logging

import pytest

from gpufleet.airflow.operators.step_report import PAGE, report_step
from gpufleet.services.common.step_report import StepReport
from gpufleet.services.infrastructure.onboarding import StepResult
from gpufleet.services.nodes.drain import DrainProgress
from gpufleet.services.nodes.remediation import RemediationResult

REPORTS = [
    StepReport("old_pool_drained", notes=["a note"], alerts=["an alert"]),
    DrainProgress("drain", notes=["a note"], alerts=["an alert"], state={"batch": ["n0"]}),
    RemediationResult("remediation", notes=["a note"], alerts=["an alert"], pages=["a page"]),
    StepResult("network", notes=["a note"], actions=[{"action": "created"}]),
]


@pytest.mark.parametrize("report", REPORTS, ids=lambda r: type(r).__name__)
def test_every_step_report_is_logged_and_alerted_one_way(report, caplog, monkeypatch):
    monkeypatch.delenv("AIRFLOW_CONN_GPUFLEET_ALERTS", raising=False)
    task_log = logging.getLogger("test.step_report")
    with caplog.at_level(logging.INFO):
        report_step(task_log, report, alert="drain waiting", where="c1 p1", run_id="r1")
    notes = [r.getMessage() for r in caplog.records if r.name == "test.step_report"]
    assert notes == [f"{report.step}: {note}" for note in report.notes]
    alerts = [r.getMessage() for r in caplog.records if r.getMessage().startswith("ALERT ")]
    assert alerts == [f"ALERT drain waiting: c1 p1 (r1): {a}" for a in report.alerts] + [
        f"ALERT {PAGE}: c1 p1 (r1): {p}" for p in report.pages
    ]


def test_a_prefix_replaces_the_step_in_the_log(caplog):
    task_log = logging.getLogger("test.step_report")
    with caplog.at_level(logging.INFO):
        report_step(
            task_log,
            StepReport("remediation", notes=["n1: drained"]),
            alert="x",
            where="c1/p1",
            prefix="c1/p1",
        )
    assert [r.getMessage() for r in caplog.records] == ["c1/p1: n1: drained"]


def test_waiting_and_absorbing_keep_what_a_step_said():
    outer = StepReport("rolled_back", notes=["first"])
    outer.absorb(StepReport("drain", notes=["second"], alerts=["late"], pages=["person"]))
    outer.wait(30.0)
    assert (outer.done, outer.next_check_s) == (False, 30.0)
    assert (outer.notes, outer.alerts, outer.pages) == (["first", "second"], ["late"], ["person"])
    waiting = StepResult("cluster")
    waiting.wait_on(["c1", "cluster", "c1"])
    assert not waiting.done and waiting.to_dict()["waiting"] == [["c1", "cluster", "c1"]]
    assert set(StepResult("x").to_dict()) == {"step", "actions", "notes", "waiting"}
