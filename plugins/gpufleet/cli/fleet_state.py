"""Which fleet a command acts on: the state folder and the ledger, named in one line.

A command run outside ``make``'s environment may read another fleet than ``make run`` wrote
(``AIRFLOW_HOME`` unset: Airflow's default ``~/airflow``). ``gpufleet status``, ``gate`` and
``sim show`` print ``describe()`` so the user sees which one. ``open_ledger`` opens the ledger
for a command, turning any failure (a URL SQLAlchemy cannot parse, an unknown driver, a corrupt
file) into one ``LedgerError`` line that never shows the URL's password.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

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


def airflow_connection(conn_id: str) -> Any | None:
    """Airflow's own lookup of ``conn_id`` (environment, secrets backends, metadata DB), asked
    through Airflow's CLI: this command imports no Airflow (the layers keep ``gpufleet.cli`` and
    ``gpufleet.airflow`` apart), so it asks the ``airflow`` installed beside it. None when the
    connection is not defined, when no Airflow is installed here, or when Airflow's metadata DB
    was never set up; any other failure is a ``LedgerError`` (never the empty default)."""
    if os.environ.get(f"AIRFLOW_CONN_{conn_id.upper()}"):
        # set in this environment: what Airflow's lookup finds too (a secrets backend naming
        # the same id aside), read here without starting Airflow (seconds per command)
        return None
    exe = Path(sys.executable).parent / "airflow"
    found = str(exe) if exe.exists() else shutil.which("airflow")
    if not found:
        return None
    try:
        proc = subprocess.run(
            [found, "connections", "get", conn_id, "--output", "json"],
            capture_output=True,
            text=True,
            timeout=300,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise LedgerError(
            f"cannot ask Airflow for the connection {conn_id}: {type(exc).__name__} "
            "(set GPUFLEET_LEDGER_URL to name the ledger directly)"
        ) from None
    text = proc.stdout + proc.stderr
    if proc.returncode == 0:
        rows = json.loads(proc.stdout[proc.stdout.index("[") :])
        return SimpleNamespace(**{**rows[0], "extra_dejson": rows[0].get("extra_dejson") or {}})
    if "Connection not found" in text or "no such table" in text:
        return None
    last = [line for line in text.splitlines() if line.strip()][-1:] or ["no output"]
    raise LedgerError(
        f"Airflow could not look up the connection {conn_id} (the ledger's location): "
        f"{last[0][:200]} (fix Airflow's metadata DB or secrets backend, or set "
        "GPUFLEET_LEDGER_URL)"
    )


def ledger_location() -> tuple[str, str]:
    """The configured ledger's URL and what named it, found as tasks and the UI find it
    (``gpufleet.store.database.resolve_ledger_url`` with Airflow's own connection lookup);
    a location that cannot be read is one ``LedgerError`` line."""
    from gpufleet.store import resolve_ledger_url

    try:
        return resolve_ledger_url(airflow_connection)
    except GpufleetError:
        raise
    except Exception as exc:  # noqa: BLE001 - e.g. AIRFLOW_CONN_GPUFLEET_LEDGER is bad JSON
        raise LedgerError(
            f"cannot read the ledger's location: {type(exc).__name__} "
            "(check GPUFLEET_LEDGER_URL / the Airflow connection gpufleet_ledger)"
        ) from None


def open_ledger() -> Ledger:
    """The ledger this command uses, found as tasks and the UI find it
    (``gpufleet.store.database.resolve_ledger_url`` with Airflow's own connection lookup);
    any failure to open it is one ``LedgerError`` line."""
    from gpufleet.store import Ledger, refuse_missing_file

    url, source = ledger_location()
    refuse_missing_file(url, source)
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
        raise LedgerError(f"{message} (named by {source})") from None
