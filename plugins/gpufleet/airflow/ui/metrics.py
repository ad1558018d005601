"""``GET /metrics``: the fleet for Prometheus, in its text exposition format.

Design: docs/design/fleet-cache.md.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Request
from fastapi.responses import PlainTextResponse, Response

from gpufleet.airflow.ui.exposition import Exposition
from gpufleet.airflow.ui.heap import cycle_collector_paused
from gpufleet.airflow.ui.pool_series import pool_series, time_prefixes, time_series

if TYPE_CHECKING:
    from gpufleet.domain.fleet import Catalog
    from gpufleet.services.views.fleet_cache import FleetCache
    from gpufleet.store import Ledger

log = logging.getLogger(__name__)

METRICS_CONN_ID = "gpufleet_metrics"
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


class SeriesMemo:
    """Each cluster's ledger series (``pool_series.pool_series``) as text, kept between scrapes
    by the api-server: per ledger URL and cluster, valid while the catalog is the same object
    and the cluster's inputs were read at the same ledger version (``FleetInputs.versions``,
    from a ``FleetCache``); what the scrape's time decides is written anew each scrape."""

    def __init__(self) -> None:
        self._kept: dict[tuple[str, str], tuple[Any, int, tuple]] = {}
        self._stages: dict[tuple[str, str], tuple[Any, int, dict]] = {}
        self.written = 0  # clusters whose series were written (not taken from the memo)

    def stage_observations(
        self, key: tuple[str, str], catalog: Catalog, version: int | None, rows: Any
    ) -> dict:
        """The cluster's stage observations (``stage_series.observe`` of its latest
        ``rows``), kept as the series are."""
        from gpufleet.airflow.ui.stage_series import observe

        hit = self._stages.get(key)
        if version is not None and hit and hit[0] is catalog and hit[1] == version:
            return hit[2]
        got = observe(rows)
        if version is not None:
            self._stages[key] = (catalog, version, got)
        return got

    def families(self, key: tuple[str, str], catalog: Catalog, version: int | None, write) -> tuple:
        """The cluster's families (name -> (help, lines)) and its pools' ``time_prefixes``:
        kept, else ``write()``'s."""
        hit = self._kept.get(key)
        if version is not None and hit and hit[0] is catalog and hit[1] == version:
            return hit[2]
        families = write()
        self.written += 1
        if version is not None:
            self._kept[key] = (catalog, version, families)
        return families


class FleetMetrics:
    """The fleet's gauges, read from the ledger when written (``exposition``); ``cache``: what
    the api-server keeps between scrapes (``services.views.fleet_cache.FleetCache``), with
    ``memo`` the text of each cluster's ledger series (``SeriesMemo``)."""

    def __init__(
        self,
        catalog: Catalog,
        ledger: Ledger,
        now: datetime | None = None,
        cache: FleetCache | None = None,
        memo: SeriesMemo | None = None,
    ):
        self.catalog = catalog
        self.ledger = ledger
        self.now = now or datetime.now(UTC)
        self.cache = cache
        self.memo = memo or SeriesMemo()

    def exposition(self) -> bytes:
        from gpufleet.services.views.fleet import pool_verdicts

        # the readiness table's verdicts, and the ledger rows they were judged on
        verdicts, inputs = pool_verdicts(self.catalog, self.ledger, self.now, cache=self.cache)
        by_cluster: dict[str, list] = {}
        for v in verdicts:
            by_cluster.setdefault(v.ref.cluster.name, []).append(v)
        versions = inputs.versions or {}
        url = getattr(self.ledger, "url", "")
        ledger_side = Exposition()
        now_side = Exposition()
        stages: dict[tuple[str, str], list[float]] = {}
        for cluster, cluster_verdicts in by_cluster.items():
            latest = inputs.reads.latest.get(cluster, {})
            got = self.memo.stage_observations(
                (url, cluster), self.catalog, versions.get(cluster), latest.values()
            )
            for key, values in got.items():
                stages.setdefault(key, []).extend(values)

            def write(vs=cluster_verdicts, latest=latest) -> tuple[dict, list]:
                out, prefixes = Exposition(), []
                for v in vs:
                    key = (v.ref.cluster.name, v.ref.pool.name)
                    pool_series(out, v, latest, inputs.quarantined.get(key, 0))
                    prefixes.append(time_prefixes(v, latest))
                return out.families, prefixes

            families, prefixes = self.memo.families(
                (url, cluster), self.catalog, versions.get(cluster), write
            )
            ledger_side.extend(families)
            time_series(now_side, cluster_verdicts, prefixes, self.now)
        now_side.extend(ledger_side.families)
        # reliability (docs/remediation.md): one query for the window, written each scrape
        from gpufleet.airflow.ui.reliability_series import histograms, open_incidents
        from gpufleet.services.views.reliability import reliability_window

        window = reliability_window(self.ledger, self.now)
        pools = [(v.ref.cluster.name, v.ref.pool.name) for v in verdicts]
        open_incidents(now_side, pools, window)
        # what holds remediation back: breakers tripped, approvals waiting (two small reads)
        from gpufleet.airflow.ui.safety_series import safety_series
        from gpufleet.services.views.safety import safety_view

        safety_series(now_side, safety_view(self.ledger, self.now))
        from gpufleet.airflow.ui import stage_series

        return (
            now_side.text()
            + histograms(window, now_side)
            + stage_series.histograms(stages, now_side)
        )


def exposition(
    catalog: Catalog,
    ledger: Ledger,
    now: datetime | None = None,
    cache: FleetCache | None = None,
    memo: SeriesMemo | None = None,
) -> bytes:
    """The fleet's metrics in the text exposition format."""
    return FleetMetrics(catalog, ledger, now, cache, memo).exposition()


def _default_ledger() -> Ledger:
    """The ledger as tasks find it (``LedgerHook``: the Airflow connection from environment,
    secrets backend or metadata DB); a configured ledger that cannot be reached raises."""
    from gpufleet.airflow.hooks import LedgerHook

    return LedgerHook().get_conn()


def _default_catalog() -> Catalog:
    from gpufleet.config.catalog import load_catalog

    return load_catalog()


def make_router(
    ledger_factory: Callable[[], Ledger] | None = None,
    catalog_factory: Callable[[], Catalog] | None = None,
    connection: Callable[[], Any | None] = _connection,
    cache: FleetCache | None = None,
) -> APIRouter:
    """The ``/metrics`` route; the factories default to the configured ledger and catalog and
    the ``gpufleet_metrics`` connection, each read per scrape; ``cache`` (a ``FleetCache``,
    shared with the app's pages; a new one by default) keeps the ledger's rows between
    scrapes."""
    from gpufleet.services.views.fleet_cache import FleetCache

    api = APIRouter()
    cache = cache if cache is not None else FleetCache()
    memo = SeriesMemo()

    @api.get("/metrics", include_in_schema=False)
    def metrics(request: Request) -> Response:  # sync: the ledger reads block (threadpool)
        from prometheus_client import CONTENT_TYPE_LATEST

        try:
            check_scrape(request.headers.get("authorization"), connection())
        except MetricsAuthError as exc:
            headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else {}
            return PlainTextResponse(exc.detail + "\n", exc.status, headers=headers)
        from gpufleet.airflow.ui.unreachable import unreachable_errors, unreachable_response

        ledger = None
        try:
            with cycle_collector_paused():  # a fleet-wide read, freed before it resumes
                catalog = (catalog_factory or _default_catalog)()
                ledger = (ledger_factory or _default_ledger)()
                body = exposition(catalog, ledger, cache=cache, memo=memo)
        except unreachable_errors() as exc:  # 503 in text: which ledger, and what to do
            return unreachable_response(request, exc, ledger)
        return Response(body, media_type=CONTENT_TYPE_LATEST)

    return api


router = make_router()
