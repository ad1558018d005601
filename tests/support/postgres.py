"""The one "is PostgreSQL up" check, for every test that needs the server at 127.0.0.1:5432.

``require_postgres()`` returns when PostgreSQL answers. When it does not: with ``CI=true`` (the
CI machines run one, so its absence is a broken machine, not a laptop) the test FAILS saying
so; anywhere else it is skipped, saying why and that CI would fail. ``missing(reason)`` is the
same verdict for a check of its own (the live Airflow's DSN probe): fail in CI, skip elsewhere.

``GPUFLEET_TEST_PG_PORT`` moves the port the check knocks on (default 5432) and nothing else:
the fixtures still connect to 5432. It exists so a test of this rule can point the check at a
closed port (tests/test_postgres_required.py).
"""

from __future__ import annotations

import os
import socket
from typing import NoReturn

import pytest

HOST = "127.0.0.1"
PORT_ENV = "GPUFLEET_TEST_PG_PORT"
MISSING_IN_CI = "CI=true and PostgreSQL is missing"


def port() -> int:
    return int(os.environ.get(PORT_ENV) or 5432)


def in_ci() -> bool:
    """``CI`` set to true (GitHub Actions, GitLab CI and most others set ``CI=true``)."""
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def postgres_up(timeout: float = 1.0) -> bool:
    """True when something accepts a TCP connection at ``HOST:port()``."""
    try:
        with socket.create_connection((HOST, port()), timeout=timeout):
            return True
    except OSError:
        return False


def missing(reason: str) -> NoReturn:
    """PostgreSQL is not there (``reason`` says how it was found out): fail under CI, else skip."""
    if in_ci():
        pytest.fail(
            f"{MISSING_IN_CI}: {reason}. CI machines run PostgreSQL at {HOST}:5432 (trust "
            "auth, user postgres): start it; PostgreSQL tests never skip in CI",
            pytrace=False,
        )
    pytest.skip(f"{reason} (skipped outside CI; with CI=true this fails)")


def require_postgres() -> None:
    """Return when PostgreSQL answers at ``HOST:port()``; else ``missing(...)``."""
    if not postgres_up():
        missing(f"PostgreSQL does not answer at {HOST}:{port()}")
