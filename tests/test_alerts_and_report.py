"""Alerts reach a webhook over HTTP; the report and metrics say what the ledger says."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime, timedelta
from html.parser import HTMLParser
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from types import SimpleNamespace

import pytest

from gpufleet.airflow.notifiers import FleetAlertNotifier
from gpufleet.airflow.ui.metrics import exposition
from gpufleet.services.views.report import html_report, markdown, svg_chart


@pytest.fixture
def webhook():
    received: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 - http.server API
            body = self.rfile.read(int(self.headers["Content-Length"]))
            received.append({"path": self.path, "body": json.loads(body)})
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}", received
    server.shutdown()
    server.server_close()


def context(error: str) -> dict:
    ti = SimpleNamespace(dag_id="nightly_fabric_validation", task_id="validate_fabric", map_index=2)
    return {
        "ti": ti,
        "run_id": "scheduled__2026-11-29T02:00:00+00:00",
        "exception": RuntimeError(error),
    }


def test_alert_is_logged_without_a_connection(caplog, monkeypatch):
    monkeypatch.delenv("AIRFLOW_CONN_GPUFLEET_ALERTS", raising=False)
    FleetAlertNotifier(summary="nightly failed").notify(context("a3u-sim/h200-a degraded"))
    assert "ALERT nightly failed: nightly_fabric_validation.validate_fabric[2]" in caplog.text
    assert "a3u-sim/h200-a degraded" in caplog.text


def test_alert_posts_slack_text_to_the_webhook(webhook, monkeypatch):
    url, received = webhook
    monkeypatch.setenv(
        "AIRFLOW_CONN_GPUFLEET_ALERTS",
        json.dumps(
            {"conn_type": "http", "password": f"{url}/hook/T1", "extra": {"format": "slack"}}
        ),
    )
    FleetAlertNotifier(summary="nightly failed").notify(context("fabric down"))
    assert received == [
        {
            "path": "/hook/T1",
            "body": {
                "text": (
                    "nightly failed: nightly_fabric_validation.validate_fabric[2] "
                    "(scheduled__2026-11-29T02:00:00+00:00): fabric down"
                )
            },
        }
    ]


def test_alert_posts_json_and_survives_an_unreachable_webhook(webhook, monkeypatch, caplog):
    url, received = webhook
    monkeypatch.setenv(
        "AIRFLOW_CONN_GPUFLEET_ALERTS", json.dumps({"conn_type": "http", "password": url})
    )
    FleetAlertNotifier(summary="s").notify(context("e"))
    assert received[0]["body"]["where"] == "nightly_fabric_validation.validate_fabric[2]"
    monkeypatch.setenv(
        "AIRFLOW_CONN_GPUFLEET_ALERTS",
        json.dumps({"conn_type": "http", "password": "http://127.0.0.1:9"}),
    )
    FleetAlertNotifier(summary="s").notify(context("e"))
    assert "could not deliver the alert" in caplog.text


def test_a_webhook_in_the_host_field_delivers_nothing_and_says_where_it_belongs(
    webhook, monkeypatch, caplog
):
    url, received = webhook
    monkeypatch.setenv(
        "AIRFLOW_CONN_GPUFLEET_ALERTS", json.dumps({"conn_type": "http", "host": url})
    )
    FleetAlertNotifier(summary="s").notify(context("e"))
    assert received == []
    assert "ALERT s: nightly_fabric_validation.validate_fabric[2]" in caplog.text  # still logged
    assert "webhook URL belongs in its password field" in caplog.text
    assert url not in caplog.text


ROW = {
    "cluster": "c",
    "pool": "p",
    "kind": "fabric",
    "passed": False,
    "transport": "socket",
    "expected_transport": "gib",
    "busbw_gbps": 21.9,
    "baseline_gbps": 355.0,
    "nodes_tested": 4,
    "reasons": ["every pair failed"],
    "read_mb_s": None,
    "write_mb_s": None,
    "expected_mb_s": None,
    "finished_at": datetime(2026, 11, 29, 2, 5, tzinfo=UTC),
}


def test_markdown():
    text = markdown("r1", [ROW], [])
    assert "**0 of 1 checks passed.**" in text
    assert "| c/p | FAIL | socket (gib) | 21.9 | 355 | 4 | every pair failed |" in text
    assert "## Drift" not in text and "Validation cost" not in text  # nothing recorded


def test_the_report_adds_up_what_validation_cost_per_pool_and_per_node():
    def row(pool, kind, minutes, nodes):
        details = {"gpu_minutes": minutes, "cost_nodes": nodes}
        details["gpu_minutes_per_node"] = minutes / nodes
        return {**ROW, "pool": pool, "kind": kind, "details": details}

    rows = [
        row("p", "fabric", 96.0, 8),  # 12 per node
        row("p", "storage", 16.0, 8),  # 2 per node
        row("q", "fabric", 48.0, 4),  # 12 per node
        {**ROW, "pool": "old", "details": {}},  # recorded before costs were measured
    ]
    text = markdown("r1", rows, [])
    assert "| c/p | 112.0 | 14.00 |" in text and "| c/q | 48.0 | 12.00 |" in text
    assert "c/old" not in text.split("## Validation cost")[1]
    # (96 + 16 + 48) GPU-minutes over 8 + 4 nodes
    assert (
        "**Validation cost: 13.3 GPU-minutes per node per night "
        "(160.0 GPU-minutes over 12 nodes).**"
    ) in text
    page = html_report("r1", rows, [], {}, {})
    assert "<th>GPU-minutes per node</th>" in page and "<td>c/p</td>" in page


def test_chart_marks_failed_nights_red():
    history = [{**ROW, "passed": True, "busbw_gbps": 352.0, "transport": "gib"}, ROW]
    svg = svg_chart(history, 355.0)
    assert svg.count("<rect") == 2 and 'fill="#c1121f"' in svg and "baseline 355" in svg


def test_a_check_that_could_not_finish_is_reported_as_error_until_a_retry_supersedes_it(
    fleet_state,
):
    from gpufleet.config.catalog import load_catalog
    from gpufleet.services.views.nightly_report import nightly_report
    from gpufleet.store import Ledger

    ledger, catalog, run = Ledger(), load_catalog(), "scheduled__2026-11-29T02:00:00+00:00"
    ledger.record_validation_error(
        run, "a3u-sim", "h200-a", "fabric", "fabric validation could not finish: boom"
    )
    report = nightly_report(ledger, catalog, run)
    assert report.failed == [
        "a3u-sim/h200-a fabric could not finish: fabric validation could not finish: boom"
    ]
    assert "**0 of 1 checks passed; 1 could not finish.**" in report.markdown
    assert "| a3u-sim/h200-a | ERROR |" in report.markdown
    assert '<span class="ERROR">ERROR</span>' in Path(report.paths["report.html"]).read_text()
    assert set(report.to_dict()) == {
        "paths",
        "markdown",
        "failed",
        "checks",
        "warnings",
        "not_validated",
    }
    assert "metrics.prom" not in report.paths  # /metrics serves them live
    # the task's retry passes: its verdict is the check's last word in this run
    ledger.record_validation(
        run_id=run,
        cluster="a3u-sim",
        pool="h200-a",
        kind="fabric",
        passed=True,
        started_at=datetime(2026, 11, 29, 2, 10, tzinfo=UTC),
        transport="gib",
        expected_transport="gib",
        reasons=["every pair passed"],
    )
    report = nightly_report(ledger, catalog, run)
    assert report.failed == [] and report.checks == 1
    assert "**1 of 1 checks passed.**" in report.markdown
    metrics = exposition(catalog, ledger).decode()
    assert 'gpufleet_validation_passed{cluster="a3u-sim",kind="fabric",pool="h200-a"} 1.0' in (
        metrics
    )
    assert 'gpufleet_validation_error{cluster="a3u-sim",kind="fabric",pool="h200-a"} 0.0' in (
        metrics
    )


def record_drifting_history(ledger, nights: int = 14) -> str:
    """``nights`` passing nights of a3u-sim/h200-a near 350 GB/s, then tonight at 330 GB/s:
    still above the pass threshold (0.9 x 355), well below the pool's own history."""
    start = datetime(2026, 11, 1, 2, 0, tzinfo=UTC)
    for i, busbw in enumerate([350.0 + (-1.0) ** i * (i % 3) for i in range(nights)] + [330.0]):
        run = f"scheduled__night-{i:02d}"
        ledger.record_validation(
            run_id=run,
            cluster="a3u-sim",
            pool="h200-a",
            kind="fabric",
            passed=True,
            started_at=start + timedelta(days=i),
            transport="gib",
            expected_transport="gib",
            busbw_gbps=busbw,
            baseline_gbps=355.0,
            nodes_tested=6,
            reasons=["every pair passed"],
            details={"small_latency_us": 31.0},
        )
        ledger.set_pool_state("a3u-sim", "h200-a", "validated", "every pair passed", run)
    return run


def test_a_drifting_pool_is_reported_and_alerted_with_its_figures_but_does_not_fail(
    fleet_state, webhook, monkeypatch
):
    from gpufleet.airflow.operators.nightly import ValidationReportOperator
    from gpufleet.store import Ledger

    url, received = webhook
    monkeypatch.setenv(
        "AIRFLOW_CONN_GPUFLEET_ALERTS", json.dumps({"conn_type": "http", "password": url})
    )
    ledger = Ledger()
    run = record_drifting_history(ledger)
    ctx = {
        "run_id": run,
        "ti": SimpleNamespace(
            get_task_states=lambda dag_id, run_ids: {},  # no task failed
            xcom_pull=lambda task_ids: None,  # no targets: checks recorded by hand
        ),
        "dag": SimpleNamespace(dag_id="nightly_fabric_validation"),
    }
    paths = ValidationReportOperator(task_id="report").execute(ctx)  # a warning: no failure
    report = Path(paths["report.md"]).read_text()
    assert "**1 of 1 checks passed.**" in report
    drift = report.split("## Drift")[1].split("##")[0]
    assert "- a3u-sim/h200-a: busbw 330.0 GB/s is" in drift and "below its 14-night median" in drift
    assert "Drift" in Path(paths["report.html"]).read_text()
    assert ledger.pool_state("a3u-sim", "h200-a")["state"] == "drifting"
    (alert,) = received
    assert alert["body"]["summary"] == "fleet drifting (still passing)"
    assert alert["body"]["run_id"] == run
    assert "a3u-sim/h200-a: busbw 330.0 GB/s is" in alert["body"]["error"]
    assert "median 350" in alert["body"]["error"]


def test_a_steady_pool_gets_no_drift_section_and_no_warning(fleet_state):
    from gpufleet.config.catalog import load_catalog
    from gpufleet.services.views.nightly_report import nightly_report
    from gpufleet.store import Ledger

    ledger = Ledger()
    run = record_drifting_history(ledger, nights=14)
    # tonight's figure replaced by a steady one: record the night again, as a retry would
    ledger.record_validation(
        run_id=run,
        cluster="a3u-sim",
        pool="h200-a",
        kind="fabric",
        passed=True,
        started_at=datetime(2026, 11, 15, 3, 0, tzinfo=UTC),
        transport="gib",
        expected_transport="gib",
        busbw_gbps=349.5,
        baseline_gbps=355.0,
        nodes_tested=6,
        details={"small_latency_us": 31.0},
    )
    report = nightly_report(ledger, load_catalog(), run)
    assert report.warnings == [] and "## Drift" not in report.markdown


HOSTILE = "NCCL WARN <img src=x onerror=alert(1)>"
FORGED = "GKE: bad | request\n## All pools passed"  # a pipe and a line that looks like a heading


class _Report(HTMLParser):
    """A report page as a browser reads it: its tags, its h2 headings, the text of each cell of
    the fabric table's rows, and whether anything inline (script, style) would run or apply."""

    def __init__(self):
        super().__init__()
        self.tags: list[str] = []
        self.headings: list[str] = []
        self.inline: list[str] = []
        self.rows: list[list[str]] = []
        self._in: str | None = None

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        names = {k for k, _ in attrs}
        if tag == "style" or (tag == "script" and "src" not in names):
            self.inline.append(tag)
        self.inline += [f"{tag}[{k}]" for k in names if k == "style" or k.startswith("on")]
        if tag == "tr":
            self.rows.append([])
        if tag in ("h2", "td"):
            self._in = tag
            if tag == "h2":
                self.headings.append("")
            else:
                self.rows[-1].append("")

    def handle_endtag(self, tag):
        if tag == self._in:
            self._in = None

    def handle_data(self, data):
        if self._in == "h2":
            self.headings[-1] += data
        elif self._in == "td":
            self.rows[-1][-1] += data


def _read(page: str) -> _Report:
    parsed = _Report()
    parsed.feed(page)
    return parsed


def test_a_reason_carrying_markup_comes_out_as_text_in_the_written_report_and_the_tab(
    fleet_state,
):
    """Reasons come from NCCL WARN lines and cloud API errors: markup in one is text, a pipe or
    a newline in one stays inside its cell, in the report the nightly writes and in the run's
    Fleet report tab alike (one renderer), and neither carries inline style or script (the
    pages' Content-Security-Policy allows neither)."""
    from gpufleet.config.catalog import load_catalog
    from gpufleet.services.views.nightly_report import nightly_report
    from gpufleet.services.views.pool import run_report
    from gpufleet.store import Ledger
    from tests.support.ledger_helpers import quarantine

    ledger, catalog, run = Ledger(), load_catalog(), "manual__<b>hostile</b>"
    ledger.record_validation(
        run_id=run,
        cluster="a3u-sim",
        pool="h200-a",
        kind="fabric",
        passed=False,
        started_at=datetime(2026, 11, 29, 2, 0, tzinfo=UTC),
        transport="socket",
        expected_transport="gib",
        busbw_gbps=21.0,
        baseline_gbps=355.0,
        nodes_tested=2,
        reasons=[HOSTILE, FORGED],
    )
    quarantine(ledger, "a3u-sim", "h200-a", "n-<i>0</i>", "<script>alert(2)</script>", run)
    written = Path(nightly_report(ledger, catalog, run).paths["report.html"]).read_text()
    tab = run_report(ledger, catalog, run)["html"]
    for page in (written, tab):
        parsed = _read(page)
        assert not {"img", "script", "b", "i"} & set(parsed.tags), parsed.tags
        assert "&lt;img src=x onerror=alert(1)&gt;" in page
        assert "&lt;script&gt;alert(2)&lt;/script&gt;" in page
        assert not [h for h in parsed.headings if "All pools passed" in h], parsed.headings
        (fabric,) = [r for r in parsed.rows if r and r[0] == "a3u-sim/h200-a"]
        assert fabric[-1] == f"{HOSTILE}; {FORGED}", fabric
    assert _read(tab).inline == [], _read(tab).inline
    # one renderer: the tab's body is the written report's body
    assert written.split("<body>", 1)[1] == tab.split("<body>", 1)[1]


def test_the_markdown_keeps_a_reason_with_a_pipe_or_newline_in_its_cell():
    text = markdown("r1", [{**ROW, "reasons": [FORGED]}], [])
    (line,) = [line for line in text.splitlines() if line.startswith("| c/p ")]
    assert line.endswith("| GKE: bad \\| request ## All pools passed |"), line
    assert "\n## All pools passed" not in text
