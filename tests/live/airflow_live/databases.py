"""The deployment's PostgreSQL databases: created (migrated, or copied from the cached migrated
template, ``TEMPLATE_PREFIX``) and dropped through an admin connection."""

from __future__ import annotations

import contextlib
import hashlib
import os
import subprocess
from collections.abc import Mapping
from pathlib import Path

from tests.live.airflow_live.common import run_step, venv_bin
from tests.live.airflow_live.services import pg_dsn


def pg_admin(statement: str) -> None:
    import psycopg2

    conn = psycopg2.connect(pg_dsn())
    try:
        conn.autocommit = True  # CREATE/DROP DATABASE cannot run in a transaction
        with conn.cursor() as cur:
            cur.execute(statement)
    finally:
        conn.close()


def pg_url(dbname: str) -> str:
    """A SQLAlchemy URL for ``dbname`` on the server ``pg_dsn()`` names."""
    import psycopg2.extensions

    params = psycopg2.extensions.parse_dsn(pg_dsn())
    user = params.get("user", "postgres")
    password = params.get("password")
    auth = f"{user}:{password}" if password else user
    host = params.get("host", "127.0.0.1")
    port = params.get("port", "5432")
    return f"postgresql+psycopg2://{auth}@{host}:{port}/{dbname}"


# A migrated metadata DB is the same for every session on one Airflow: the first session
# migrates its database and keeps a copy on the server, ``gpufleet_live_template_<key>``; later
# ones copy it (CREATE DATABASE ... TEMPLATE, ~0.4 s) instead of ``airflow db migrate`` (4 s
# idle, 7 s on a busy 2-core machine). The key covers what migrating depends on: the versions
# of the virtualenv's apache-airflow* distributions and the log templates migrate records.
TEMPLATE_PREFIX = "gpufleet_live_template_"

_AIRFLOW_VERSIONS_PROBE = """
import importlib.metadata as m, json
names = {(d.metadata["Name"] or "").lower(): d.version for d in m.distributions()}
print(json.dumps(sorted((n, v) for n, v in names.items() if n.startswith("apache-airflow"))))
"""


def template_name(env: Mapping[str, str]) -> str | None:
    """The cached migrated database this session may copy (None: ``GPUFLEET_LIVE_TEMPLATE=0``
    or the versions could not be read)."""
    if os.environ.get("GPUFLEET_LIVE_TEMPLATE", "1") == "0":
        return None
    probe = subprocess.run(
        [str(venv_bin() / "python"), "-c", _AIRFLOW_VERSIONS_PROBE],
        capture_output=True,
        text=True,
        check=False,
    )
    if probe.returncode != 0 or "apache-airflow" not in probe.stdout:
        return None
    key = "\n".join(
        [
            probe.stdout.strip(),
            env.get("AIRFLOW__LOGGING__LOG_FILENAME_TEMPLATE", ""),
            env.get("AIRFLOW__ELASTICSEARCH__LOG_ID_TEMPLATE", ""),
        ]
    )
    return TEMPLATE_PREFIX + hashlib.sha256(key.encode()).hexdigest()[:16]


def create_migrated_postgres(
    database: str, env: Mapping[str, str], log_dir: Path, airflow: Path
) -> str:
    """Create ``database`` migrated: a copy of the cached template when there is one, else
    created empty and migrated (then cached). How it was made: "copied" or "migrated"."""
    import psycopg2

    template = template_name(env)
    if template:
        try:
            pg_admin(f'CREATE DATABASE "{database}" TEMPLATE "{template}"')
            return "copied"
        except psycopg2.Error:
            pass  # none cached yet (or another session is making it): migrate
    pg_admin(f'CREATE DATABASE "{database}"')
    run_step("db-migrate", [str(airflow), "db", "migrate"], env, log_dir, 300)
    if template:
        # no connection to ``database`` is open (migrate exited); a session that made the
        # template first wins, the others' copies are dropped with their databases
        with contextlib.suppress(psycopg2.Error):
            pg_admin(f'CREATE DATABASE "{template}" TEMPLATE "{database}"')
        _drop_stale_templates(keep=template)
    return "migrated"


def _drop_stale_templates(keep: str) -> None:
    """Drop the cached templates of other Airflow versions (best effort: one being copied
    right now stays; a lock wait gives up after a second)."""
    import psycopg2

    with contextlib.suppress(psycopg2.Error):
        conn = psycopg2.connect(pg_dsn())
        try:
            conn.autocommit = True
            with conn.cursor() as cur:
                cur.execute(
                    "SELECT datname FROM pg_database WHERE datname LIKE %s AND datname <> %s",
                    (TEMPLATE_PREFIX.replace("_", r"\_") + "%", keep),
                )
                stale = [row[0] for row in cur.fetchall()]
                cur.execute("SET lock_timeout = '1s'")
                for name in stale:
                    with contextlib.suppress(psycopg2.Error):
                        cur.execute(f'DROP DATABASE IF EXISTS "{name}"')
        finally:
            conn.close()
