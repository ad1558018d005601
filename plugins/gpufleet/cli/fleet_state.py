"""Which fleet a command acts on: the state folder and the ledger, named in one line.

A command run outside ``make``'s environment may read another fleet than ``make run`` wrote
(``AIRFLOW_HOME`` unset: Airflow's default ``~/airflow``). ``gpufleet status``, ``gate`` and
``sim show`` print ``describe()`` so the user sees which one. ``open_ledger`` opens the ledger
for a command, turning any failure (a URL SQLAlchemy cannot parse, an unknown driver, a corrupt
file) into one ``LedgerError`` line that never shows the URL's password.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from gpufleet.config.paths import airflow_home, state_dir
from gpufleet.errors import GpufleetError, LedgerError

if TYPE_CHECKING:
    from gpufleet.store import Ledger


def state_source() -> str:
    """Why the state folder is where it is (which setting chose it)."""
    if os.environ.get("GPUFLEET_STATE_DIR"):
        return "from GPUFLEET_STATE_DIR"
    if os.environ.get("AIRFLOW_HOME"):
        return "from AIRFLOW_HOME"
    if airflow_home() == Path.home() / "airflow":
        return "AIRFLOW_HOME unset: Airflow's default ~/airflow"
    return "this checkout's .airflow/"


def describe(ledger: Ledger | None = None) -> str:
    """``fleet state: <folder> (ledger <url without password>; <why that folder>)``."""
    ledger_text = f"ledger {ledger.safe_url}; " if ledger is not None else ""
    return f"fleet state: {state_dir()} ({ledger_text}{state_source()})"


def _safe(url: str) -> tuple[str, str | None]:
    """``url`` without user info, and the password (to scrub from messages)."""
    from sqlalchemy.engine import make_url

    from gpufleet.store.database import display_url

    try:
        return display_url(url), make_url(url).password
    except ValueError:  # an unparseable URL is shown by its scheme only
        scheme = url.split("://", 1)[0] if "://" in url else ""
        return (f"{scheme}://... (unparseable)" if scheme else "(an unparseable URL)"), None


def open_ledger() -> Ledger:
    """The ledger this command uses; any failure to open it is one ``LedgerError`` line."""
    from gpufleet.store import Ledger, default_ledger_url

    try:
        url = default_ledger_url()
    except GpufleetError:
        raise
    except Exception as exc:  # noqa: BLE001 - e.g. AIRFLOW_CONN_GPUFLEET_LEDGER is bad JSON
        raise LedgerError(
            f"cannot read the ledger's location: {type(exc).__name__} "
            "(check GPUFLEET_LEDGER_URL / AIRFLOW_CONN_GPUFLEET_LEDGER)"
        ) from None
    safe, password = _safe(url)
    try:
        return Ledger(url)
    except Exception as exc:  # noqa: BLE001 - a LedgerError too: say which ledger, once
        message = str(exc)
        if password:
            message = message.replace(password, "***")
        if not isinstance(exc, GpufleetError):
            message = f"{type(exc).__name__}: {message}"
        if safe not in message:
            message = f"cannot open the ledger at {safe}: {message}"
        raise LedgerError(message) from None
