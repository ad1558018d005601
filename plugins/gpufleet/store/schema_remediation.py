"""The ledger's remediation tables (v19), part of ``store/schema.py``'s one ``metadata``, which
imports them back (docs/remediation.md). The ladder's memory is the node lifecycle's own
evidence (``gf_node_events``: each ``repairing`` move records its rung); these keep the rest.

- ``gf_breakers``: every trip of a blast-radius breaker (scope ``pool``, ``cluster`` or
  ``fleet``, its key, why, the figures) and its reset by a person (who, when, why). A trip with
  no reset holds every automated action in its scope.
- ``gf_remediation_holds``: what the machine did not do to a node and why: ``would_have`` (a
  pool's behaviour profile or the fleet's dry run held it back) or ``held`` (a tripped breaker).
"""

from __future__ import annotations

from sqlalchemy import CheckConstraint, Column, Index, Integer, String, Table, Text

from gpufleet.store.schema_base import metadata
from gpufleet.store.schema_base import timestamp as _ts

BREAKER_SCOPES = ("pool", "cluster", "fleet")
HOLD_KINDS = ("would_have", "held")

breakers = Table(
    "gf_breakers",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("scope", String(16), nullable=False),
    Column("key", String(128), nullable=False),
    Column("reason", Text, nullable=False),
    Column("affected", Integer, nullable=False),
    Column("limit_nodes", Integer, nullable=False),
    _ts("tripped_at", nullable=False),
    Column("run_id", String(250)),
    _ts("reset_at"),
    Column("reset_by", String(128)),
    Column("reset_reason", Text),
    CheckConstraint(
        "scope IN (" + ", ".join(f"'{s}'" for s in BREAKER_SCOPES) + ")",
        name="ck_gf_breakers_scope",
    ),
)
Index("ix_gf_breakers_key", breakers.c.scope, breakers.c.key, breakers.c.reset_at)

remediation_holds = Table(
    "gf_remediation_holds",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("cluster", String(63), nullable=False),
    Column("pool", String(63), nullable=False),
    Column("node", String(253), nullable=False),
    Column("action", String(32), nullable=False),
    Column("kind", String(16), nullable=False),
    Column("reason", Text, nullable=False),
    _ts("at", nullable=False),
    Column("run_id", String(250)),
    CheckConstraint(
        "kind IN (" + ", ".join(f"'{k}'" for k in HOLD_KINDS) + ")",
        name="ck_gf_remediation_holds_kind",
    ),
)
Index(
    "ix_gf_remediation_holds_node",
    remediation_holds.c.cluster,
    remediation_holds.c.node,
    remediation_holds.c.at,
)
