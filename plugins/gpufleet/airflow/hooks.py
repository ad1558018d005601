"""``LedgerHook``: the one way every Airflow entry point finds the fleet ledger.

Tasks, the UI pages and ``/metrics`` open the ledger through it, in the order
``gpufleet.store.database.resolve_ledger_url`` defines: ``GPUFLEET_LEDGER_URL``; else the
Airflow connection ``gpufleet_ledger`` as Airflow itself finds it (in a task through the Task
SDK; in the api-server through ``Connection.get_connection_from_secrets``: environment
variables, secrets backends and the metadata DB); else, only when nothing is configured, the
local SQLite default. A configured ledger that cannot be reached, or a configured SQLite file
that does not exist, is a ``LedgerError`` naming the connection and the URL without its
credentials, never an empty SQLite file: only ``gpufleet ledger init`` creates a ledger.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseHook

if TYPE_CHECKING:
    from gpufleet.store import Ledger


def _in_task() -> bool:
    """In a task (or dag.test) process: connections come through the Task SDK's supervisor."""
    runner = sys.modules.get("airflow.sdk.execution_time.task_runner")
    return getattr(runner, "SUPERVISOR_COMMS", None) is not None


def find_connection(conn_id: str) -> Any | None:
    """Airflow's own lookup of ``conn_id``; None when no backend defines it."""
    if _in_task():
        from airflow.sdk.exceptions import AirflowNotFoundException

        try:
            return BaseHook.get_connection(conn_id)
        except AirflowNotFoundException:
            return None
    from airflow.exceptions import AirflowNotFoundException as CoreNotFound
    from airflow.models.connection import Connection

    try:  # the api-server's chain: environment, secrets backends, metadata DB
        return Connection.get_connection_from_secrets(conn_id)
    except CoreNotFound:
        return None


class LedgerHook(BaseHook):
    """The fleet ledger named by an Airflow connection (default ``gpufleet_ledger``)."""

    conn_name_attr = "ledger_conn_id"
    default_conn_name = "gpufleet_ledger"
    conn_type = "gpufleet_ledger"
    hook_name = "gpufleet ledger"

    def __init__(self, ledger_conn_id: str | None = None, **kwargs: Any):
        super().__init__(**kwargs)
        self.ledger_conn_id = ledger_conn_id or self.default_conn_name

    def resolve(self) -> tuple[str, str]:
        """``(url, where it came from)``, without opening anything."""
        from gpufleet.store import resolve_ledger_url

        return resolve_ledger_url(find_connection, self.ledger_conn_id)

    def get_conn(self) -> Ledger:
        """The ledger, its schema prepared. A configured SQLite file that does not exist is
        refused (``LedgerError``: run ``gpufleet ledger init``), by tasks as by readers (UI,
        /metrics): none of them creates a configured ledger (``store.opening``)."""
        from gpufleet.errors import LedgerError
        from gpufleet.store import open_ledger
        from gpufleet.store.database import display_url

        url, source = self.resolve()
        try:
            return open_ledger(url, source)
        except LedgerError as exc:
            if source in str(exc):
                raise
            raise LedgerError(f"the ledger named by {source} cannot be used: {exc}") from None
        except Exception as exc:  # noqa: BLE001 - a driver missing, a URL SQLAlchemy refuses
            raise LedgerError(
                f"the ledger named by {source} ({_safe(url, display_url)}) cannot be opened: "
                f"{type(exc).__name__}"
            ) from None


def _safe(url: str, display_url: Any) -> str:
    try:
        return display_url(url)
    except ValueError:
        return "an unparseable URL"
