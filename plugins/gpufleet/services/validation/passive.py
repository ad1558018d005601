"""Passive GPU health of busy nodes: what each node's dcgm-exporter serves, read while
a job holds its GPUs, decided by the rules of the nightly's own check.

Design: docs/design/gpu-health.md.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from gpufleet.backends.base import ClusterBackend
from gpufleet.domain.fleet import PoolRef
from gpufleet.domain.health import HealthAction
from gpufleet.errors import BackendError
from gpufleet.services.nodes.readings import exporter_decision
from gpufleet.services.validation.health import NodeHealth

log = logging.getLogger(__name__)

PASSIVE_LEVEL = 0  # a NodeHealth's level when read passively: no dcgmi diag ran


def read_exporter(text: str, node: str) -> NodeHealth:
    """One node's passive check from the text its dcgm-exporter served (the rule the event
    path's interval reading applies too: ``services.nodes.readings.exporter_decision``)."""
    read = exporter_decision(text, node)
    decision = read.decision
    if decision is None:
        return NodeHealth(PASSIVE_LEVEL, None, f"not checked: {read.why}")
    notes = list(decision.notes) + [f"not read: {p}" for p in read.problems]
    return NodeHealth(
        PASSIVE_LEVEL, decision.action.value, decision.reason, notes, verdict=decision.verdict.value
    )


def passive_checks(
    backend: ClusterBackend, ref: PoolRef, nodes: Iterable[str]
) -> dict[str, NodeHealth]:
    """Each of ``nodes`` (the pool's busy nodes) read passively from its dcgm-exporter; a node
    with no exporter is left out."""
    out: dict[str, NodeHealth] = {}
    for node in nodes:
        try:
            text = backend.gpu_metrics(node)
        except BackendError as e:
            why = f"not checked: {node}'s dcgm-exporter could not be read ({e})"
            out[node] = NodeHealth(PASSIVE_LEVEL, None, why)
            continue
        if text is None:
            continue
        out[node] = read_exporter(text, node)
    for node, health in out.items():
        if health.action != HealthAction.HEALTHY.value:
            log.warning(
                "%s: %s GPU health (passive): %s - %s",
                ref.key,
                node,
                health.action or "not checked",
                health.reason,
            )
    return out
