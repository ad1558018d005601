"""The ledger's CHECKs hold exactly the domain's vocabularies, on SQLite and PostgreSQL, in a
new ledger (created from ``store.schema``) and in one built through every Alembic revision (what
an upgraded ledger holds). A member added to an enum without a revision widening its CHECK, or
a CHECK that no longer derives from its enum, fails here before a ledger refuses a row."""

from __future__ import annotations

import re
from enum import StrEnum

import pytest
from sqlalchemy import text

from gpufleet.domain.gate import PoolState, TransitionState
from gpufleet.domain.validation_kinds import ValidationKind
from gpufleet.store import Ledger
from gpufleet.store import schema as s
from tests.store.test_ledger import ledger_url  # noqa: F401  (fixture: SQLite and PostgreSQL)
from tests.test_ledger_migrations import build

# (the enum, the table and column it constrains, the CHECK's name)
CHECKED: list[tuple[type[StrEnum], str, str, str]] = [
    (ValidationKind, "gf_validations", "kind", "ck_gf_validations_kind"),
    (PoolState, "gf_pool_state", "state", "ck_gf_pool_state_state"),
    (PoolState, "gf_pool_events", "state", "ck_gf_pool_events_state"),
    (TransitionState, "gf_transitions", "state", "ck_gf_transitions_state"),
]


def check_values(conn, table: str, column: str, name: str) -> list[set[str]]:
    """The values each place of CHECK ``name`` allows in ``column``: PostgreSQL's constraint;
    on SQLite the constraint in the table's SQL or, where a revision made it triggers, each
    trigger's condition."""
    if conn.dialect.name == "postgresql":
        found = conn.execute(
            text(
                "SELECT pg_get_constraintdef(c.oid) FROM pg_constraint c "
                "JOIN pg_class t ON c.conrelid = t.oid WHERE c.conname = :n AND t.relname = :t"
            ),
            {"n": name, "t": table},
        ).scalars()
        lists = list(found)
    else:
        rows = conn.exec_driver_sql(
            "SELECT sql FROM sqlite_master WHERE (type = 'table' AND name = ?) "
            "OR (type = 'trigger' AND name IN (?, ?))",
            (table, f"{name}_insert", f"{name}_update"),
        ).scalars()
        pattern = rf"CONSTRAINT {name} CHECK \({column} IN \(([^)]*)\)|NEW\.{column} IN \(([^)]*)\)"
        lists = [m.group(1) or m.group(2) for sql in rows for m in re.finditer(pattern, sql)]
    return [set(re.findall(r"'([^']*)'", each)) for each in lists]


@pytest.mark.parametrize("made", ["new", "upgraded"])
@pytest.mark.parametrize(
    ("vocabulary", "table", "column", "name"), CHECKED, ids=[c[3] for c in CHECKED]
)
def test_each_check_allows_exactly_its_enum(ledger_url, made, vocabulary, table, column, name):  # noqa: F811
    if made == "new":
        engine = Ledger(ledger_url).engine
    else:
        engine = build(ledger_url, s.SCHEMA_VERSION, legacy=False)
    with engine.connect() as conn:
        places = check_values(conn, table, column, name)
    assert places, f"{table} has no CHECK {name}"
    for allowed in places:
        assert allowed == {member.value for member in vocabulary}


def test_every_enum_of_a_check_is_checked():
    """The list above covers every CHECK over an IN list that ``store.schema`` declares."""
    declared = {name for _, name, expr in s.CHECKS if " IN (" in expr}
    assert declared == {c[3] for c in CHECKED}
