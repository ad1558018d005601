"""Alerts reach a webhook over HTTP; the report and metrics say what the ledger says."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from types import SimpleNamespace

import pytest

from gpufleet.airflow.notifiers import FleetAlertNotifier
from gpufleet.services.report import markdown, prometheus, svg_chart


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
            {"conn_type": "http", "host": url, "extra": {"format": "slack", "path": "/hook/T1"}}
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
        "AIRFLOW_CONN_GPUFLEET_ALERTS", json.dumps({"conn_type": "http", "host": url})
    )
    FleetAlertNotifier(summary="s").notify(context("e"))
    assert received[0]["body"]["where"] == "nightly_fabric_validation.validate_fabric[2]"
    monkeypatch.setenv(
        "AIRFLOW_CONN_GPUFLEET_ALERTS",
        json.dumps({"conn_type": "http", "host": "http://127.0.0.1:9"}),
    )
    FleetAlertNotifier(summary="s").notify(context("e"))
    assert "could not deliver the alert" in caplog.text


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


def test_markdown_and_metrics():
    text = markdown("r1", [ROW], [])
    assert "**0 of 1 checks passed.**" in text
    assert "| c/p | FAIL | socket (gib) | 21.9 | 355 | 4 | every pair failed |" in text
    metrics = prometheus([ROW], [{"cluster": "c", "pool": "p"}])
    assert 'gpufleet_fabric_transport_ok{cluster="c",pool="p"} 0' in metrics
    assert 'gpufleet_validation_passed{cluster="c",pool="p",kind="fabric"} 0' in metrics
    assert 'gpufleet_quarantined_nodes{cluster="c",pool="p"} 1' in metrics
    assert "# TYPE gpufleet_fabric_busbw_gbps gauge" in metrics


def test_chart_marks_failed_nights_red():
    history = [{**ROW, "passed": True, "busbw_gbps": 352.0, "transport": "gib"}, ROW]
    svg = svg_chart(history, 355.0)
    assert svg.count("<rect") == 2 and 'fill="#c1121f"' in svg and "baseline 355" in svg


def test_a_check_that_could_not_finish_is_reported_as_error_until_a_retry_supersedes_it(
    fleet_state,
):
    from gpufleet.config.catalog import load_catalog
    from gpufleet.services.nightly import nightly_report
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
    assert set(report.to_dict()) == {"paths", "markdown", "failed", "checks"}
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
    metrics = Path(report.paths["metrics.prom"]).read_text()
    assert metrics.count("gpufleet_validation_passed{") == 1
