"""The fleet ledger: validation results, pool lifecycle, quarantines, transitions, gate
decisions and launches.

Its own database (never Airflow's metadata DB): the Airflow connection ``LEDGER_CONN_ID``
(``gpufleet_ledger``), by default a SQLite file under ``$AIRFLOW_HOME/gpufleet``, PostgreSQL in
docker-compose. ``database`` finds it (one resolution order for every entry point, Airflow's
connection lookup injected by the caller), ``opening`` opens it (a configured SQLite file that
is not there is refused: only ``init_ledger``, ``gpufleet ledger init``, creates one), ``schema``
holds the versioned tables, ``ledger`` the reads and writes. SQLAlchemy Core. May import
``gpufleet.config`` and ``gpufleet.domain``.
"""

from gpufleet.store.database import (
    LEDGER_CONN_ID,
    connection_to_url,
    default_ledger_url,
    refuse_missing_file,
    resolve_ledger_url,
)
from gpufleet.store.ledger import Ledger
from gpufleet.store.opening import LedgerInit, init_ledger, open_ledger

__all__ = [
    "LEDGER_CONN_ID",
    "Ledger",
    "LedgerInit",
    "connection_to_url",
    "default_ledger_url",
    "init_ledger",
    "open_ledger",
    "refuse_missing_file",
    "resolve_ledger_url",
]
