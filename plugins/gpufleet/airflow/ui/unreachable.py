"""What the pages, their data and ``/metrics`` answer when the ledger cannot be read: 503, never
a bare 500 and never a 404 "Unknown pool".

The ledger is unreachable when opening it fails (``LedgerError``: a PostgreSQL server that
does not answer, a configured SQLite file that does not exist, a connection lookup that fails)
or when a read on an open ledger fails at the database (any driver error, SQLAlchemy's
``DBAPIError``: the server went away, the file is locked, unreadable or not a database; or a
pool checkout timed out). The answer says which ledger (where its location came from, e.g.
the Airflow connection ``gpufleet_ledger``, and its host and database or file, never the user
name or password) and what to do. Pages get an HTML message, ``/api`` JSON ``{"detail": ...}``,
``/metrics`` plain text; each with ``Retry-After``.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from gpufleet.errors import LedgerError

if TYPE_CHECKING:
    from gpufleet.store import Ledger

RETRY_AFTER_S = 60
_USER = re.compile(r'(\buser\s+)"[^"]*"')
WHAT_TO_DO = (
    "start the ledger's database, or fix the Airflow connection gpufleet_ledger (or "
    "GPUFLEET_LEDGER_URL) to name the ledger the DAGs write; a SQLite ledger that does not "
    "exist yet is created by `gpufleet ledger init`"
)


def unreachable_errors() -> tuple[type[Exception], ...]:
    """The exceptions that mean "the ledger cannot be read" (see the module)."""
    from sqlalchemy.exc import DBAPIError
    from sqlalchemy.exc import TimeoutError as PoolTimeout

    return (LedgerError, DBAPIError, PoolTimeout)


def _where(ledger: Ledger | None) -> tuple[str, list[str]]:
    """The ledger as a person reads it, and the password to scrub from a driver's message:
    ``ledger`` (the last one opened) if any, else the configured one (``LedgerHook``)."""
    from gpufleet.store.database import display_url

    url = getattr(getattr(ledger, "engine", None), "url", None)
    source = getattr(ledger, "source", None)
    if url is None:
        try:
            from gpufleet.airflow.hooks import LedgerHook

            url, source = LedgerHook().resolve()
        except Exception:  # noqa: BLE001 - the lookup itself failing: say what we can
            return "the configured ledger", []
    try:
        from sqlalchemy.engine import make_url

        parsed = make_url(url)
        secrets = [str(parsed.password)] if parsed.password else []
        safe = display_url(parsed)
    except (ValueError, Exception):  # noqa: BLE001 - an unparseable URL is not shown
        return (f"the ledger named by {source}" if source else "the ledger"), []
    named = f"the ledger named by {source} ({safe})" if source else f"the ledger at {safe}"
    return named, secrets


def unreachable_text(exc: BaseException, ledger: Ledger | None = None) -> str:
    """One paragraph: which ledger cannot be read, why (the driver's first line, credentials
    scrubbed), and what to do."""
    if isinstance(exc, LedgerError):  # says which ledger already (store, hooks)
        why, secrets = str(exc), _where(ledger)[1]
    else:
        named, secrets = _where(ledger)
        orig = getattr(exc, "orig", None) or exc
        first = (str(orig).strip().splitlines() or [type(orig).__name__])[0][:300]
        why = f"{named} cannot be read: {type(orig).__name__}: {first}"
    for secret in secrets:
        why = why.replace(secret, "***")
    why = _USER.sub(r'\1"***"', why)  # PostgreSQL names the user: 'for user "fleet"'
    why = " ".join(why.split()).rstrip(". ")  # a driver's message spans lines
    why += "" if why.endswith(("?", "!")) else "."
    from gpufleet.store.database import INIT_COMMAND

    todo = "" if INIT_COMMAND in why else f" What to do: {WHAT_TO_DO}."  # said already
    return f"gpufleet cannot read its ledger: {why}{todo}"


def unreachable_response(request: Any, exc: BaseException, ledger: Ledger | None = None) -> Any:
    """The 503 for ``request``: JSON under ``/api/``, text for ``/metrics``, else a page."""
    from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse

    from gpufleet.airflow.ui import pages

    message = unreachable_text(exc, ledger)
    headers = {"Retry-After": str(RETRY_AFTER_S)}
    path = request.url.path
    if path.endswith("/metrics"):
        return PlainTextResponse(message + "\n", 503, headers=headers)
    if "/api/" in path:
        return JSONResponse({"detail": message}, 503, headers=headers)
    page = pages.message_page("gpufleet: ledger unreachable", "Ledger unreachable", message)
    return HTMLResponse(page, 503, headers=headers)
