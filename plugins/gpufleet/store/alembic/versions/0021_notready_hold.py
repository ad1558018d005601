"""Version 21: a node signal's response takes ``hold`` and ``lift``
(docs/events.md#the-notready-hold): a node in service going NotReady is held
validation-pending at once, and the hold is lifted when it is back without a reboot. Through
``migrations.replace_check`` (on a SQLite ledger the CHECK's list is rewritten in place).
Existing rows stay valid: the list only grows.

Revision ID: 0021
Revises: 0020
"""

from __future__ import annotations

from alembic import op

from gpufleet.store.migrations import replace_check

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None

RESPONSES = "'note', 'lift', 'forget', 'hold', 'admit', 'quarantine'"


def upgrade() -> None:
    replace_check(
        op.get_bind(),
        "gf_node_signals",
        "ck_gf_node_signals_response",
        f"{{c}}response IN ({RESPONSES})",
    )


def downgrade() -> None:
    raise NotImplementedError("the ledger only moves forward")
