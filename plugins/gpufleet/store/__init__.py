"""The fleet ledger: validation results, pool lifecycle, quarantines, transitions, launches.

Its own database (never Airflow's metadata DB): the Airflow connection ``gpufleet_ledger``,
by default a SQLite file under ``$AIRFLOW_HOME/gpufleet``, PostgreSQL in docker-compose.
SQLAlchemy Core. May import ``gpufleet.config`` and ``gpufleet.domain``.
"""

from gpufleet.store.ledger import Ledger, connection_to_url, default_ledger_url

__all__ = ["Ledger", "connection_to_url", "default_ledger_url"]
