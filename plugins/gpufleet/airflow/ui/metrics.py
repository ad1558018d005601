"""``GET /metrics``: the fleet for Prometheus, in its text exposition format.

Read from the ledger (and the catalog) at scrape time: nothing is kept between scrapes, and
nothing registers in ``prometheus_client``'s global registry (the api-server's own metrics stay
apart). The text is written by ``exposition.Exposition`` as ``prometheus_client.generate_latest``
writes it, without a sample object per value: 2,000 pools make some 30,000 samples.

Prometheus cannot hold a UI session, so ``/metrics`` does not use Airflow's login: it takes a
static bearer token, the password of the Airflow connection ``gpufleet_metrics`` (Prometheus
reads it from ``bearer_token_file``), compared in constant time. A request without it, or with
another, gets 401. The endpoint is open without a token only when the connection says so
explicitly (extra ``{"allow_anonymous": true}``); without the connection it answers 503 with how
to configure it, never the figures.

The series (gauges; labels ``cluster``, ``pool``, and ``region``/``kind``/``metric`` where said):

- ``gpufleet_pool_ready`` (region): 1 when the gate would launch on the pool now
  (``services.views.fleet.pool_readiness``, the readiness table's own rules);
- ``gpufleet_pool_drifting``: 1 when the pool's state is ``drifting``; with, per drifting
  metric of its latest validations (``details["drift"]``), ``gpufleet_drift_latest``,
  ``_median``, ``_noise`` and ``_limit`` (metric);
- ``gpufleet_validation_passed``, ``gpufleet_validation_error``,
  ``gpufleet_validation_age_seconds`` (kind: fabric, storage, health): the last verdict of each
  kind (a pool whose GPU health was never checked has no ``kind="health"`` series);
- ``gpufleet_fabric_busbw_gbps``, ``gpufleet_fabric_baseline_gbps``,
  ``gpufleet_fabric_small_latency_us``, ``gpufleet_fabric_transport_ok``;
- ``gpufleet_lustre_read_mb_s``, ``_write_mb_s``, ``_expected_mb_s``;
- ``gpufleet_health_nodes_checked``; ``gpufleet_health_level_nodes`` (level): nodes that ran
  each ``dcgmi diag`` level; ``gpufleet_health_unhealthy_nodes`` (action: every action but
  healthy, 0 included): from the pool's last health row (``services.views.health``);
- ``gpufleet_quarantined_nodes``; ``gpufleet_out_of_service_nodes`` (state);
- ``gpufleet_validation_gpu_minutes``, ``gpufleet_validation_gpu_minutes_per_node`` (kind):
  what the last validation of each kind cost.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import PlainTextResponse, Response

from gpufleet.airflow.ui.exposition import Exposition, Labels
from gpufleet.airflow.ui.heap import cycle_collector_paused

log = logging.getLogger(__name__)

METRICS_CONN_ID = "gpufleet_metrics"
KINDS = ("fabric", "storage", "health")
HOW_TO_CONFIGURE = (
    f"create the Airflow connection {METRICS_CONN_ID!r} with the scrape token as its password "
    f"(e.g. AIRFLOW_CONN_{METRICS_CONN_ID.upper()}="
    '\'{"conn_type": "generic", "password": "<token>"}\'), and give Prometheus the same token '
    "in bearer_token_file; or, to serve the metrics without a token, set its extra to "
    '{"allow_anonymous": true}'
)


class MetricsAuthError(Exception):
    """Why a scrape is refused: ``status`` 401 (no or wrong token) or 503 (not configured)."""

    def __init__(self, status: int, detail: str):
        super().__init__(detail)
        self.status = status
        self.detail = detail


def _connection() -> Any | None:
    """The ``gpufleet_metrics`` connection (environment variable, secrets backend or the
    metadata DB, as the api-server reads connections), or None when it is not defined."""
    from airflow.exceptions import AirflowNotFoundException
    from airflow.models.connection import Connection

    try:
        return Connection.get_connection_from_secrets(METRICS_CONN_ID)
    except AirflowNotFoundException:
        return None
    except Exception as exc:  # a secrets backend or the metadata DB failing: refuse, say why
        log.warning("cannot read the connection %s: %s", METRICS_CONN_ID, type(exc).__name__)
        raise MetricsAuthError(
            503, f"cannot read the connection {METRICS_CONN_ID!r} ({type(exc).__name__})"
        ) from None


def check_scrape(authorization: str | None, conn: Any | None) -> None:
    """Allow the scrape or raise ``MetricsAuthError``: the connection's password must come as
    ``Authorization: Bearer <password>`` (compared in constant time), unless its extra sets
    ``allow_anonymous`` to JSON ``true``."""
    if conn is None:
        raise MetricsAuthError(503, f"/metrics is not configured: {HOW_TO_CONFIGURE}")
    extra = conn.extra_dejson if isinstance(conn.extra_dejson, dict) else {}
    if extra.get("allow_anonymous") is True:
        return
    token = (conn.password or "").strip()
    if not token:
        raise MetricsAuthError(
            503, f"the connection {METRICS_CONN_ID!r} has no password: {HOW_TO_CONFIGURE}"
        )
    scheme, _, given = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not given.strip():
        raise MetricsAuthError(401, "/metrics needs 'Authorization: Bearer <token>'")
    if not hmac.compare_digest(given.strip().encode(), token.encode()):
        raise MetricsAuthError(401, "the bearer token is not the one /metrics accepts")


class FleetMetrics:
    """The fleet's gauges, read from the ledger when written (``exposition``)."""

    def __init__(self, catalog: Any, ledger: Any, now: datetime | None = None):
        self.catalog = catalog
        self.ledger = ledger
        self.now = now or datetime.now(UTC)

    def exposition(self) -> bytes:
        from gpufleet.services.views.fleet import DRIFTING, pool_verdicts

        out = Exposition()
        gauge = out.gauge
        quarantined: dict[tuple[str, str], int] = {}
        for q in self.ledger.quarantined():
            key = (q["cluster"], q["pool"])
            quarantined[key] = quarantined.get(key, 0) + 1
        # the readiness table's verdicts, and the ledger rows they were judged on
        verdicts, reads = pool_verdicts(self.catalog, self.ledger, self.now)
        for v in verdicts:
            cluster, pool = v.ref.cluster.name, v.ref.pool.name
            at = Labels(cluster=cluster, pool=pool)
            gauge(
                "gpufleet_pool_ready",
                "1 when the gate would launch on the pool now (the readiness table's rules)",
                at.plus("region", v.ref.region.name),
                int(v.ready),
            )
            gauge(
                "gpufleet_pool_drifting",
                "1 when the pool's figures drift from its own history (state drifting)",
                at.text,
                int(v.state == DRIFTING),
            )
            gauge(
                "gpufleet_quarantined_nodes",
                "nodes of the pool quarantined (ledger)",
                at.text,
                quarantined.get((cluster, pool), 0),
            )
            for state, count in sorted(v.out_of_service.items()):
                gauge(
                    "gpufleet_out_of_service_nodes",
                    "nodes of the pool out of service, by lifecycle state",
                    at.plus("state", state),
                    count,
                )
            latest = reads.latest.get(cluster, {})
            for kind in KINDS:
                row = latest.get((pool, kind))
                if row is not None:
                    self._validation(out, at, row)
        return out.text()

    def _validation(self, out: Exposition, at: Labels, row: dict) -> None:
        """The series of the pool's last validation of one kind (``row``); ``at``: the pool's
        labels (cluster, pool)."""
        gauge = out.gauge
        kind = row["kind"]
        labels = at.plus("kind", kind)
        details = row.get("details") if isinstance(row.get("details"), dict) else {}
        gauge(
            "gpufleet_validation_passed",
            "1 when the pool's last validation of this kind passed",
            labels,
            int(row["passed"] is True),
        )
        gauge(
            "gpufleet_validation_error",
            "1 when the pool's last validation of this kind could not finish",
            labels,
            int(row.get("verdict") == "error"),
        )
        if row.get("finished_at") is not None:
            gauge(
                "gpufleet_validation_age_seconds",
                "seconds since the pool's last validation of this kind finished",
                labels,
                (self.now - row["finished_at"]).total_seconds(),
            )
        gauge(
            "gpufleet_validation_gpu_minutes",
            "GPU-minutes the pool's last validation of this kind held (its pods' run times)",
            labels,
            details.get("gpu_minutes"),
        )
        gauge(
            "gpufleet_validation_gpu_minutes_per_node",
            "GPU-minutes per node tested of the pool's last validation of this kind",
            labels,
            details.get("gpu_minutes_per_node"),
        )
        if kind == "fabric":
            gauge(
                "gpufleet_fabric_busbw_gbps",
                "lowest large-message all-reduce bus bandwidth of the pool's good pairs",
                at.text,
                row.get("busbw_gbps"),
            )
            gauge(
                "gpufleet_fabric_baseline_gbps",
                "the baseline the pool's bus bandwidth is judged against",
                at.text,
                row.get("baseline_gbps"),
            )
            gauge(
                "gpufleet_fabric_small_latency_us",
                "median small-message latency of the pool's passing pairs",
                at.text,
                details.get("small_latency_us"),
            )
            if row.get("transport"):
                gauge(
                    "gpufleet_fabric_transport_ok",
                    "1 when NCCL used the pool's expected transport",
                    at.text,
                    int(row["transport"] == row.get("expected_transport")),
                )
        elif kind == "health":
            self._health(out, at, row)
        elif kind == "storage":
            for name, column, what in (
                ("read_mb_s", "read_mb_s", "aggregate fio read throughput"),
                ("write_mb_s", "write_mb_s", "aggregate fio write throughput"),
                ("expected_mb_s", "expected_mb_s", "the tier x capacity expected"),
            ):
                gauge(f"gpufleet_lustre_{name}", f"{what} (MB/s)", at.text, row.get(column))
        findings = details.get("drift")
        for finding in findings if isinstance(findings, list) else ():
            if not isinstance(finding, dict) or not isinstance(finding.get("metric"), str):
                continue
            where = at.plus("metric", finding["metric"])
            for figure, what in (
                ("latest", "tonight's figure of a drifting metric"),
                ("median", "the metric's median over the pool's recent passing nights"),
                ("noise", "the noise of that history, in the metric's unit"),
                ("limit", "the figure beyond which the metric counts as drifting"),
            ):
                gauge(f"gpufleet_drift_{figure}", what, where, finding.get(figure))

    def _health(self, out: Exposition, at: Labels, row: dict) -> None:
        """The pool's last GPU health check (``services.views.health.health_summary``): nodes
        checked, per ``dcgmi diag`` level, and the unhealthy ones per action (every action but
        healthy, 0 included, so an alert on ``> 0`` sees the series). A check that could not
        finish says nothing about nodes."""
        from gpufleet.services.views.health import UNHEALTHY_ACTIONS, health_summary

        if row.get("verdict") == "error":
            return
        gauge = out.gauge
        summary = health_summary(row, self.now)
        gauge(
            "gpufleet_health_nodes_checked",
            "nodes the pool's last GPU health check covered",
            at.text,
            summary["nodes_checked"],
        )
        for level, nodes in summary["levels"].items():
            gauge(
                "gpufleet_health_level_nodes",
                "nodes that ran this dcgmi diag level in the pool's last GPU health check",
                at.plus("level", str(level)),
                nodes,
            )
        for action, count in {**dict.fromkeys(UNHEALTHY_ACTIONS, 0), **summary["actions"]}.items():
            gauge(
                "gpufleet_health_unhealthy_nodes",
                "nodes the pool's last GPU health check found unhealthy, by the action taken",
                at.plus("action", action),
                count,
            )


def exposition(catalog: Any, ledger: Any, now: datetime | None = None) -> bytes:
    """The fleet's metrics in the text exposition format."""
    return FleetMetrics(catalog, ledger, now).exposition()


def _default_ledger() -> Any:
    """The ledger as tasks find it (``LedgerHook``: the Airflow connection from environment,
    secrets backend or metadata DB); a configured ledger that cannot be reached raises."""
    from gpufleet.airflow.hooks import LedgerHook

    return LedgerHook().get_conn(create=False)


def _default_catalog() -> Any:
    from gpufleet.config.catalog import load_catalog

    return load_catalog()


def make_router(
    ledger_factory: Callable[[], Any] | None = None,
    catalog_factory: Callable[[], Any] | None = None,
    connection: Callable[[], Any | None] = _connection,
) -> APIRouter:
    """The ``/metrics`` route; the factories default to the configured ledger and catalog and
    the ``gpufleet_metrics`` connection, each read per scrape."""
    api = APIRouter()

    @api.get("/metrics", include_in_schema=False)
    def metrics(request: Request) -> Response:  # sync: the ledger reads block (threadpool)
        from prometheus_client import CONTENT_TYPE_LATEST

        try:
            check_scrape(request.headers.get("authorization"), connection())
        except MetricsAuthError as exc:
            headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else {}
            return PlainTextResponse(exc.detail + "\n", exc.status, headers=headers)
        with cycle_collector_paused():  # a fleet-wide read, freed before it resumes
            body = exposition(
                (catalog_factory or _default_catalog)(), (ledger_factory or _default_ledger)()
            )
        return Response(body, media_type=CONTENT_TYPE_LATEST)

    return api


router = make_router()
