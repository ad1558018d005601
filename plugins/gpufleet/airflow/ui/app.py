"""The gpufleet FastAPI app, mounted by the api-server at ``/gpufleet`` (``gpufleet_plugin.py``).

Design: docs/design/fleet-cache.md.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.encoders import jsonable_encoder
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, RedirectResponse, Response
from fastapi.security import HTTPAuthorizationCredentials
from fastapi.staticfiles import StaticFiles
from starlette.datastructures import MutableHeaders

from gpufleet.airflow.ui import metrics, pages, unreachable
from gpufleet.airflow.ui.heap import cycle_collector_paused
from gpufleet.services.views.render import STYLESHEET

STATIC = Path(__file__).parent / "static"
MAX_NIGHTS = 730
DEFAULT_NIGHTS = 60  # the pool page's window: bounded reads, whatever the history
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; base-uri 'self'; form-action 'self'; object-src 'none'; "
        "frame-ancestors 'self'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}


class SecurityHeaders:
    """ASGI middleware: ``SECURITY_HEADERS`` on every HTTP response of the app (pages, data,
    static files, refusals, errors it handles)."""

    def __init__(self, app: Any):
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Any) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in SECURITY_HEADERS.items():
                    headers[name] = value
            await send(message)

        await self.app(scope, receive, send_with_headers)


class NotAuthenticated(Exception):
    """No valid Airflow token on a request (``detail`` says which way it failed)."""

    def __init__(self, detail: str):
        super().__init__(detail)
        self.detail = detail


async def require_user(request: Request) -> Any:
    """The Airflow user of this request, by the api-server's own rules (``get_user``: bearer
    header first, else the UI's ``_token`` cookie); ``NotAuthenticated`` otherwise. An invalid
    or expired token is refused like a missing one."""
    from airflow.api_fastapi.core_api.security import bearer_scheme, get_user

    credentials: HTTPAuthorizationCredentials | None = await bearer_scheme(request)
    try:
        return await get_user(request, None, credentials)
    except HTTPException as exc:
        raise NotAuthenticated(str(exc.detail)) from exc


def _refuse(request: Request, exc: NotAuthenticated) -> Response:
    """401 for data routes; the login page (coming back here after) for a browser's page."""
    path = request.url.path
    wants_html = "text/html" in request.headers.get("accept", "")
    if request.method == "GET" and wants_html and "/api/" not in path:
        from airflow.api_fastapi.app import get_auth_manager

        target = path + (f"?{request.url.query}" if request.url.query else "")
        return RedirectResponse(get_auth_manager().get_url_login(next_url=target), 303)
    return JSONResponse(
        {"detail": f"not authenticated: {exc.detail}"},
        status_code=401,
        headers={"WWW-Authenticate": "Bearer"},
    )


def _default_ledger():
    """The ledger as tasks find it (``LedgerHook``: the Airflow connection from environment,
    secrets backend or metadata DB); a configured ledger that cannot be reached raises."""
    from gpufleet.airflow.hooks import LedgerHook

    return LedgerHook().get_conn()


def _default_catalog():
    from gpufleet.config.catalog import load_catalog

    return load_catalog()


def create_app(  # noqa: C901  the routes are closures over the factories, counted with it
    ledger_factory: Callable[[], Any] | None = None,
    catalog_factory: Callable[[], Any] | None = None,
) -> FastAPI:
    """The app; the factories (tests, benchmarks) default to the configured ledger and
    catalog, read per request (both are cached per process by their loaders). The fleet page,
    ``/api/fleet`` and ``/metrics`` share one ``FleetCache``: each request re-reads only the
    clusters whose ledger moved since the last."""
    from gpufleet.errors import GpufleetError, LedgerError
    from gpufleet.services.views import fleet as fleet_view
    from gpufleet.services.views import pool as pool_view
    from gpufleet.services.views.fleet_cache import FleetCache

    cache = FleetCache()

    opened: dict[str, Any] = {}  # the last ledger opened: the one a 503 names

    def ledger_of() -> Any:
        opened["ledger"] = ledger = (ledger_factory or _default_ledger)()
        return ledger

    catalog_of = catalog_factory or _default_catalog
    app = FastAPI(
        title="gpufleet",
        description="The GPU fleet's readiness and history, inside the Airflow UI.",
        dependencies=[],
        docs_url=None,  # generated docs would answer without a login: off
        redoc_url=None,
        openapi_url=None,
    )
    app.add_middleware(SecurityHeaders)
    # Starlette types a handler as taking any Exception; _refuse takes the one it is added for
    app.add_exception_handler(NotAuthenticated, _refuse)  # type: ignore[arg-type]

    def ledger_unreachable(request: Request, exc: Exception) -> Response:
        """503 naming the ledger that cannot be read and what to do (``unreachable``)."""
        return unreachable.unreachable_response(request, exc, opened.get("ledger"))

    for error in unreachable.unreachable_errors():
        app.add_exception_handler(error, ledger_unreachable)

    @app.get("/static/gpufleet.css", include_in_schema=False)
    def stylesheet() -> FileResponse:
        """The pages' and the report's one stylesheet (it lives beside the templates)."""
        return FileResponse(STYLESHEET, media_type="text/css")

    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    auth = [Depends(require_user)]

    def fleet_data(region: str | None, state: str | None) -> dict[str, Any]:
        catalog = catalog_of()
        now = datetime.now(UTC)
        known = sorted({r.region.name for r in catalog.pools()})
        regions = [region] if region else None
        if region and region not in known:
            raise HTTPException(404, f"region {region!r} is not in the fleet catalog")
        pools = fleet_view.pool_readiness(catalog, ledger_of(), now, regions, cache)
        states = sorted({p["state"] for p in pools})
        if state:
            pools = [p for p in pools if p["state"] == state]
        from gpufleet.services.views.safety import safety_view

        return {
            "now": now,
            "pools": pools,
            "cost": fleet_view.fleet_cost(pools),
            "states": states,
            "regions": known,
            "safety": safety_view(ledger_of(), now),
        }

    def pool_data(cluster: str, pool: str, nights: int) -> dict[str, Any]:
        try:
            return pool_view.pool_view(catalog_of(), ledger_of(), cluster, pool, nights)
        except LedgerError:
            raise  # the ledger cannot be read: 503 (``ledger_unreachable``), not "Unknown pool"
        except GpufleetError as exc:
            raise HTTPException(404, str(exc)) from exc

    @app.get("/", dependencies=auth, include_in_schema=False)
    def index() -> RedirectResponse:
        return RedirectResponse("fleet", 307)

    def fleet_html(region: str, state: str) -> str:
        data = fleet_data(region or None, state or None)
        return pages.fleet_page(
            data["pools"],
            data["cost"],
            data["now"],
            data["regions"],
            data["states"],
            safety=data["safety"],
            region=region,
            state=state,
        )

    @app.get("/fleet", dependencies=auth, response_class=HTMLResponse)
    def fleet(region: str | None = None, state: str | None = None) -> HTMLResponse:
        """The readiness table, filterable by region and pool state."""
        try:
            with cycle_collector_paused():  # a fleet-wide read, freed before it resumes
                return HTMLResponse(fleet_html(region or "", state or ""))
        except HTTPException as exc:
            return _message(exc.status_code, "Unknown region", exc.detail)

    @app.get("/api/fleet", dependencies=auth)
    def api_fleet(region: str | None = None, state: str | None = None) -> JSONResponse:
        with cycle_collector_paused():
            return JSONResponse(jsonable_encoder(fleet_data(region or None, state or None)))

    nights_q = Query(
        DEFAULT_NIGHTS, ge=1, le=MAX_NIGHTS, description="how many recent nights to show"
    )

    @app.get("/pools/{cluster}/{pool}", dependencies=auth, response_class=HTMLResponse)
    def pool_page(cluster: str, pool: str, nights: int = nights_q) -> HTMLResponse:
        """One pool's nights, charts, quarantines, gate decisions, launches, transitions."""
        try:
            view = pool_data(cluster, pool, nights)
        except HTTPException as exc:
            return _message(404, "Unknown pool", exc.detail)
        return HTMLResponse(pages.pool_page(view))

    @app.get("/api/pools/{cluster}/{pool}", dependencies=auth)
    def api_pool(cluster: str, pool: str, nights: int = nights_q) -> JSONResponse:
        view = pool_data(cluster, pool, nights)
        return JSONResponse(jsonable_encoder({**view, "chart": pages.chart_data(view)}))

    @app.get("/runs/{run_id}/report", dependencies=auth, response_class=HTMLResponse)
    def run_report(run_id: str, dag_id: str | None = None, format: str = "html") -> Response:
        """The nightly report of a run, from the ledger. The UI shows this tab on every DAG's
        runs (a tab cannot be limited to one DAG): a run that validated nothing says so."""
        report = pool_view.run_report(ledger_of(), catalog_of(), run_id)
        if report is None:
            which = f" of {dag_id}" if dag_id else ""
            hint = (
                f" The fleet report belongs to {fleet_view.NIGHTLY_DAG} runs."
                if dag_id and dag_id != fleet_view.NIGHTLY_DAG
                else ""
            )
            return _message(
                404, "No fleet report", f"Run {run_id!r}{which} recorded no validations.{hint}"
            )
        if format == "md":
            return Response(report["markdown"], media_type="text/markdown; charset=utf-8")
        return HTMLResponse(report["html"])

    # Prometheus' endpoint: its own bearer-token check (a scraper holds no UI session)
    app.include_router(metrics.make_router(ledger_of, catalog_factory, cache=cache))
    return app


def _message(status: int, heading: str, message: str) -> HTMLResponse:
    return HTMLResponse(
        pages.message_page(f"gpufleet: {heading}", heading, message), status_code=status
    )
