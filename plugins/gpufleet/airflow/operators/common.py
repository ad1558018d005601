"""What every gpufleet operator shares: the ledger connection, the catalog, polling."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # DAG files import operators at parse time: keep heavy imports lazy
    from gpufleet.domain.fleet import Catalog, Cluster
    from gpufleet.store import Ledger

SIM_POLL_S = 0.5
REAL_POLL_S = 30.0


def ledger(conn_id: str | None = None) -> Ledger:
    """The ledger named by the Airflow connection ``conn_id`` (None: ``gpufleet_ledger``,
    ``gpufleet.store.LEDGER_CONN_ID``), else the local default (SQLite).
    ``GPUFLEET_LEDGER_URL`` wins over both."""
    from gpufleet.store import LEDGER_CONN_ID, Ledger, connection_to_url

    if os.environ.get("GPUFLEET_LEDGER_URL"):
        return Ledger()
    from airflow.sdk import BaseHook
    from airflow.sdk.exceptions import AirflowNotFoundException

    try:
        conn = BaseHook.get_connection(conn_id or LEDGER_CONN_ID)
    except AirflowNotFoundException:
        return Ledger()
    return Ledger(connection_to_url(conn))


def catalog() -> Catalog:
    from gpufleet.config.catalog import load_catalog

    return load_catalog()


def poll_interval(cluster: Cluster) -> float:
    """Simulated clusters answer in seconds; real ones are polled gently."""
    return SIM_POLL_S if cluster.provider == "sim" else REAL_POLL_S
