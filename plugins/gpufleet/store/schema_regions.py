"""Ledger tables of region onboarding (part of ``store/schema.py``'s one ``metadata``, which
imports them back: ``schema.regions`` etc.): where each region stands, what each run found,
created, would create or refused, and the region's onboarding lock with its lease (v10)."""

from __future__ import annotations

from sqlalchemy import JSON, CheckConstraint, Column, Index, Integer, String, Table, Text

from gpufleet.store.schema_base import metadata
from gpufleet.store.schema_base import timestamp as _ts

# Region onboarding: where each region stands (onboarding | ready | failed) and, per run, what
# each step found, created, would create (dry run) or refused.
regions = Table(
    "gf_regions",
    metadata,
    Column("region", String(63), primary_key=True),
    Column("state", String(16), nullable=False),
    Column("reason", Text),
    Column("run_id", String(250)),
    _ts("updated_at", nullable=False),
    _ts("ready_at"),
    CheckConstraint("state IN ('onboarding', 'ready', 'failed')", name="ck_gf_regions_state"),
)

onboarding_actions = Table(
    "gf_onboarding_actions",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("region", String(63), nullable=False),
    Column("run_id", String(250), nullable=False),
    Column("step", String(64), nullable=False),
    Column("kind", String(32), nullable=False),
    Column("name", String(253), nullable=False),
    Column("action", String(16), nullable=False),  # found | created | would_create | refused
    Column("status", String(16)),
    Column("differences", JSON, nullable=False, default=list),
    Column("console_url", Text),
    Column("detail", JSON, nullable=False, default=dict),
    _ts("at", nullable=False),
)
Index("ix_gf_onboarding_actions_run", onboarding_actions.c.region, onboarding_actions.c.run_id)

# A region's onboarding lock (v10): one row per region while a run onboards it. The holder
# refreshes ``heartbeat_at`` each time one of its tasks touches the lock; another run takes it
# over (compare-and-set on ``run_id`` and ``heartbeat_at`` as read) only when the holder is
# dead: its run ended, or, for a run this Airflow does not know, its lease expired
# (``domain.leases``).
region_locks = Table(
    "gf_region_locks",
    metadata,
    Column("region", String(63), primary_key=True),
    Column("dag_id", String(250), nullable=False),
    Column("run_id", String(250), nullable=False),
    _ts("taken_at", nullable=False),
    _ts("heartbeat_at", nullable=False),
)
