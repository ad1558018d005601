"""Opening a ledger, and the one step that creates one.

A configured ledger is opened, never created: a SQLite ledger named by
``GPUFLEET_LEDGER_URL`` or the ``gpufleet_ledger`` connection whose file is not there is refused
by every entry point (tasks, UI, /metrics, CLI: ``open_ledger``), because SQLite would create an
empty file and the fleet would read empty from then on without a word. Only an explicit setup
step creates it: ``gpufleet ledger init`` (``init_ledger``), run by ``make setup``. Opening an
existing ledger still upgrades its schema to this code's version (``migrations.ensure_schema``);
a PostgreSQL ledger's database is created by its administrator (docker-compose:
``docker/postgres-init/``), and its tables on first open or by ``gpufleet ledger init``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import inspect, text
from sqlalchemy.exc import DBAPIError

from gpufleet.errors import LedgerError
from gpufleet.store import migrations
from gpufleet.store.database import (
    display_url,
    engine_for,
    refuse_missing_file,
    sqlite_file,
)
from gpufleet.store.ledger import Ledger
from gpufleet.store.schema import SCHEMA_VERSION


def open_ledger(url: str, source: str, *, create: bool = False) -> Ledger:
    """The ledger at ``url`` (found by ``source``: ``resolve_ledger_url``'s second value), its
    schema upgraded if older. A configured SQLite file that is not there raises
    ``LedgerError`` naming ``source`` and saying to run ``gpufleet ledger init``; ``create``
    (``init_ledger`` and tests' fixtures only) makes it instead."""
    if not create:
        refuse_missing_file(url, source)
    else:
        path = sqlite_file(url)
        if path:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
    ledger = Ledger(url)
    ledger.source = source  # where its location came from, for messages (the UI's 503)
    return ledger


@dataclass(frozen=True)
class LedgerInit:
    """What ``init_ledger`` did: ``action`` is ``created`` (a new file or an empty database
    given its tables), ``upgraded`` (from ``before``) or ``ready`` (already at this code's
    version: nothing done)."""

    url: str  # without user info or password
    source: str
    action: str
    version: int
    before: str | None = None

    def text(self) -> str:
        what = {
            "created": f"created the ledger at schema version {self.version}",
            "upgraded": f"upgraded the ledger from revision {self.before or 'pre-Alembic'} "
            f"to schema version {self.version}",
            "ready": f"nothing to do, the ledger is at schema version {self.version} already",
        }[self.action]
        return f"{what}: {self.url} (named by {self.source})"


def init_ledger(url: str, source: str) -> LedgerInit:
    """Create the ledger ``url`` names (a SQLite file and its folder; on a database server,
    the tables in the existing database), or bring an existing one to this code's schema.
    Idempotent: a ledger already at this version is left as it is. Says what it did."""
    safe = display_url(url)
    path = sqlite_file(url)
    existed = path is None or os.path.exists(path)
    before = _revision(url) if existed else None
    try:
        ledger = open_ledger(url, source, create=True)
    except LedgerError:
        raise
    except DBAPIError as exc:
        raise LedgerError(f"cannot create the ledger at {safe}: {exc.orig}") from None
    if not existed or before == "":
        action = "created"
    elif before == migrations.revision_of(SCHEMA_VERSION):
        action = "ready"
    else:
        action = "upgraded"
    return LedgerInit(
        url=ledger.safe_url, source=source, action=action, version=SCHEMA_VERSION, before=before
    )


def _revision(url: str) -> str | None:
    """The revision an existing ledger records: "" when it has no gpufleet tables yet (an
    empty database or file), None when it predates Alembic (the legacy version table)."""
    try:
        with engine_for(url).connect() as conn:
            tables = set(inspect(conn).get_table_names())
            if migrations.VERSION_TABLE in tables:
                found = conn.execute(
                    text(f"SELECT version_num FROM {migrations.VERSION_TABLE}")
                ).scalar()
                return str(found) if found is not None else ""
            return None if migrations.LEGACY_VERSION_TABLE in tables else ""
    except DBAPIError as exc:
        raise LedgerError(f"cannot reach the ledger at {display_url(url)}: {exc.orig}") from None
