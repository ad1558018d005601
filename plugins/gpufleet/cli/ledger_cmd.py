"""``gpufleet ledger init``: create the configured ledger, the one step that does.

Every other entry point (tasks, the UI, ``/metrics``, the other commands) opens the ledger and
never creates it: a configured SQLite file that is not there is refused, naming the connection
and this command (``gpufleet.store.opening``). ``init`` finds the ledger as they do
(``GPUFLEET_LEDGER_URL``, else the Airflow connection ``gpufleet_ledger``, else the local
default in the state folder), creates its file and tables or upgrades an older schema, and
says which it did; run again, it changes nothing and says so. ``make setup`` runs it.
"""

from __future__ import annotations

import argparse

__all__ = ["register", "run_init"]


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("ledger", help="set up the fleet ledger")
    ledger_sub = p.add_subparsers(dest="ledger_command", required=True, metavar="ACTION")
    init = ledger_sub.add_parser(
        "init",
        help="create the configured ledger (file and tables) or upgrade its schema; idempotent",
        description="Create the ledger the DAGs, the UI and the CLI are configured to use "
        "(GPUFLEET_LEDGER_URL, else the Airflow connection gpufleet_ledger, else "
        "$AIRFLOW_HOME/gpufleet/ledger.db), or bring an existing one to this version's "
        "schema. Nothing else creates a configured ledger.",
    )
    init.set_defaults(func=run_init)


def run_init(args) -> int:
    from gpufleet.cli.fleet_state import _safe, ledger_location
    from gpufleet.errors import GpufleetError, LedgerError
    from gpufleet.store import init_ledger

    url, source = ledger_location()
    safe, password = _safe(url)
    try:
        done = init_ledger(url, source)
    except Exception as exc:  # noqa: BLE001 - one line, never the password
        message = str(exc)
        if password:
            message = message.replace(password, "***")
        if not isinstance(exc, GpufleetError):
            message = f"cannot create the ledger at {safe}: {type(exc).__name__}: {message}"
        raise LedgerError(f"{message} (named by {source})") from None
    print(f"gpufleet ledger init: {done.text()}")
    return 0
