"""``/metrics``' safety series (``services.views.safety``; docs/remediation.md): a gauge per
breaker scope of the breakers tripped and not reset (0 when none), one series per tripped
breaker, and a gauge per approval kind of the requests waiting for a person."""

from __future__ import annotations

from typing import Any

from gpufleet.airflow.ui.exposition import Exposition, Labels
from gpufleet.services.views.safety import pending_by_kind, tripped_by_scope

TRIPPED = "gpufleet_breakers_tripped"
BREAKER = "gpufleet_breaker_tripped_since_seconds"
PENDING = "gpufleet_approvals_pending"


def safety_series(out: Exposition, view: dict[str, Any]) -> None:
    for scope, count in tripped_by_scope(view).items():
        out.gauge(
            TRIPPED,
            "Blast-radius breakers tripped and not reset by a person, per scope: no automated "
            "action runs in a tripped breaker's scope.",
            Labels(scope=scope).text,
            count,
        )
    for b in view["breakers"]:
        out.gauge(
            BREAKER,
            "When each tripped breaker tripped (UNIX seconds), until a person resets it.",
            Labels(scope=b["scope"], key=b["key"]).text,
            b["tripped_at"].timestamp(),
        )
    for kind, count in pending_by_kind(view).items():
        out.gauge(
            PENDING,
            "Approval requests waiting for a person's answer, per kind.",
            Labels(kind=kind).text,
            count,
        )
