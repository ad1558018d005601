"""Which backing services this machine offers the deployment: a PostgreSQL server for its
databases (``postgres_available``) and a Redis broker for CeleryExecutor (``redis_available``);
``forget_queue`` leaves the shared Redis as the deployment found it."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys

from tests.live.airflow_live.common import DEFAULT_PG_DSN, DEFAULT_REDIS, venv_bin


def pg_dsn() -> str:
    return os.environ.get("GPUFLEET_LIVE_PG") or DEFAULT_PG_DSN


def venv_has_postgres_drivers() -> bool:
    """Airflow 3.3 needs psycopg2 (sync) AND asyncpg (its async engine) for PostgreSQL."""
    probe = subprocess.run(
        [str(venv_bin() / "python"), "-c", "import asyncpg, psycopg2"],
        capture_output=True,
        check=False,
    )
    return probe.returncode == 0


def postgres_available() -> bool:
    """True if the PostgreSQL server for throwaway databases answers and the drivers are there."""
    if os.environ.get("GPUFLEET_LIVE_DB", "").lower() == "sqlite":
        return False
    try:
        import psycopg2
    except ImportError:
        return False
    if not venv_has_postgres_drivers():
        print(
            "live Airflow: asyncpg missing from the virtualenv (Airflow 3.3 needs it for "
            "PostgreSQL); falling back to SQLite",
            file=sys.stderr,
        )
        return False
    try:
        conn = psycopg2.connect(pg_dsn())
    except psycopg2.Error as exc:
        from tests.support.postgres import in_ci, missing

        if in_ci():  # CI machines run PostgreSQL: no quiet fallback to SQLite there
            missing(f"the live Airflow's PostgreSQL (GPUFLEET_LIVE_PG) refuses: {exc}".strip())
        return False
    conn.close()
    return True


def redis_url() -> str:
    return os.environ.get("GPUFLEET_LIVE_REDIS") or DEFAULT_REDIS


def redis_available() -> bool:
    """True if the Celery broker answers a PING and the virtualenv has the Celery provider.
    Under ``CI=true`` a broker that does not answer fails the test (CI machines run Redis)."""
    url = redis_url()
    if url.lower() == "none":
        return False
    # the provider installed (its metadata: importing it would import all of Airflow, ~3 s)
    probe = subprocess.run(
        [
            str(venv_bin() / "python"),
            "-c",
            "import importlib.metadata as m, redis; m.version('apache-airflow-providers-celery')",
        ],
        capture_output=True,
        check=False,
    )
    if probe.returncode != 0:
        return False
    import redis

    try:
        redis.Redis.from_url(url, socket_connect_timeout=2).ping()
    except redis.RedisError as exc:
        from tests.support.postgres import in_ci

        if in_ci():
            import pytest

            pytest.fail(
                f"CI=true and Redis is missing: {url} does not answer ({exc}). CI machines run "
                "Redis at 127.0.0.1:6379 for the live CeleryExecutor test: start it",
                pytrace=False,
            )
        return False
    return True


def forget_queue(queue: str) -> None:
    """Remove this deployment's queue from the shared Redis, with the messages a killed worker
    left unacknowledged for it (kombu keeps them in ``unacked``, keyed by delivery tag, each
    ``[message, exchange, routing key]``) and the remote-control bindings of its workers (a
    worker removes its own only when it exits gracefully; named ``<name>.<queue>@<host>``), so
    test runs leave the broker as they found it."""
    import redis

    with contextlib.suppress(redis.RedisError, ValueError):
        client = redis.Redis.from_url(redis_url())
        client.delete(queue, f"_kombu.binding.{queue}")
        pidbox = "_kombu.binding.celery.pidbox"
        for member in client.smembers(pidbox):
            if f".{queue}@".encode() in member:
                client.srem(pidbox, member)
                client.delete(member.split(b"\x06\x16")[-1])  # its queue, if any
        for tag, raw in client.hgetall("unacked").items():
            entry = json.loads(raw)
            if isinstance(entry, list) and len(entry) == 3 and entry[2] == queue:
                client.hdel("unacked", tag)
                client.zrem("unacked_index", tag)
