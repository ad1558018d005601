"""The ledger's approvals table (v20), part of ``store/schema.py``'s one ``metadata``, which
imports it back (docs/remediation.md#approvals).

``gf_approvals``: one request for a person's approval before a destructive step (a transition's
retire, a sub-block's report to the provider, a repair that takes a pool below its floor, a
breaker reset): what and why, who or what asked and when, the Airflow task that asks (its DAG,
run, task and map index: where the UI and ``PATCH .../hitlDetails`` answer it), the answer (who,
when, ``Approve`` or ``Reject``; ``timed_out`` when nobody answered and the safe default was
taken), and when the approved step was done.
"""

from __future__ import annotations

from sqlalchemy import JSON, CheckConstraint, Column, Index, Integer, String, Table, Text

from gpufleet.domain.remediation import APPROVAL_KINDS, APPROVAL_STATES
from gpufleet.store.schema_base import metadata
from gpufleet.store.schema_base import timestamp as _ts

approvals = Table(
    "gf_approvals",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("kind", String(32), nullable=False),
    Column("key", String(300), nullable=False),
    Column("subject", Text, nullable=False),
    Column("detail", JSON, nullable=False),
    Column("state", String(16), nullable=False),
    _ts("requested_at", nullable=False),
    Column("requested_by", String(250), nullable=False),
    Column("dag_id", String(250)),
    Column("run_id", String(250)),
    Column("task_id", String(250)),
    Column("map_index", Integer),
    _ts("answered_at"),
    Column("answered_by", String(250)),
    Column("answer", String(16)),
    _ts("acted_at"),
    Column("outcome", Text),
    CheckConstraint(
        "kind IN (" + ", ".join(f"'{k}'" for k in APPROVAL_KINDS) + ")",
        name="ck_gf_approvals_kind",
    ),
    CheckConstraint(
        "state IN (" + ", ".join(f"'{k}'" for k in APPROVAL_STATES) + ")",
        name="ck_gf_approvals_state",
    ),
)
Index("ix_gf_approvals_key", approvals.c.kind, approvals.c.key, approvals.c.state)
Index("ix_gf_approvals_state", approvals.c.state, approvals.c.id)
