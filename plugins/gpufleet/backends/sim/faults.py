"""The simulated fleet's fault model: what the faults in force mean for one pool.

The fault grammar and its parser live in ``gpufleet.domain.faults``; the faults in force are
stored by ``state.SimState`` (injected) or declared in the catalog (standing). This module
folds them into ``PoolFaults``, the effect on one pool, which the NCCL model, the programs and
the cloud backend read. The figures a fault applies are engineering choices of the simulator,
not measurements: they only have to be unmistakable to the verdicts.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from gpufleet.backends.sim.nights import drift_factor
from gpufleet.domain.faults import (
    DCGM_FAULT_KINDS,
    GPU_FAULT_KINDS,
    IN_USE_HOLD_S,
    ActiveFault,
    Fault,
)
from gpufleet.domain.workloads import RUN_ID_ANNOTATION, WORKLOAD_LABEL

DEGRADED_BUSBW_FACTOR = 0.42  # a node with a flapping NIC drags its pairs down to this share
DEGRADED_LATENCY_FACTOR = 1.6
SLOW_LUSTRE_FACTOR = 0.3  # lustre-slow without a factor
# The round suffix the fabric service adds to the run id it annotates a validation workload with
# (``RUN_ID_ANNOTATION``; services/validation/fabric.py ``_submit``: ``<run id>-r<round>``,
# and ``<run id>-health`` for the GPU health check before them): every round of one run is one
# night.
_ROUND = re.compile(r"-(?:r[0-9]+|health)$")


def night_of(body: dict[str, Any]) -> str | None:
    """The night a workload belongs to: its run id without the round, when it is a gpufleet
    validation workload (None otherwise: a training job is no night)."""
    meta = body.get("metadata") or {}
    if (meta.get("labels") or {}).get(WORKLOAD_LABEL) != "validation":
        return None
    run_id = (meta.get("annotations") or {}).get(RUN_ID_ANNOTATION)
    return _ROUND.sub("", run_id) if isinstance(run_id, str) and run_id else None


@dataclass(frozen=True)
class PoolFaults:
    """The faults in force on one pool (or on a whole cluster, for API errors)."""

    fabric_down: bool = False
    socket_busbw_gbps: float | None = None  # fabric-down:busbw=...
    degraded_nodes: frozenset[str] = frozenset()
    nic_down_nodes: frozenset[str] = frozenset()
    lustre_factor: float = 1.0
    capacity_short: int | None = None  # machines missing; -1: half the reservation
    api_error_rate: float = 0.0
    api_errors_after: int | None = None  # calls that go through before the errors start
    not_ready_nodes: frozenset[str] = frozenset()
    drifts: tuple[tuple[float, float | None], ...] = ()  # drift: (percent per night, since)
    gpu_faults: tuple[Fault, ...] = ()  # xid, row-remap-*, ecc-dbe, nvlink-down, thermal-throttle
    # and the dcgm-* faults of a node's dcgmi diag run
    # dcgm-in-use: node -> when (sim clock) its hold ends (inf: a standing fault holds for good)
    in_use_until: tuple[tuple[str, float], ...] = ()
    down_subblocks: frozenset[str] = frozenset()  # subblock-down (backends.sim.topology)
    slow_blocks: frozenset[str] = frozenset()  # block-slow
    slow_init: str | None = None  # nccl-slow-init: the NCCL init phase every rank is slow in

    @classmethod
    def of(cls, faults: Iterable[ActiveFault], pool: str | None) -> PoolFaults:  # noqa: C901  one branch per fault kind
        """Fold the faults of ``pool`` (every pool of the list when ``pool`` is None)."""
        fabric_down, busbw = False, None
        degraded: set[str] = set()
        nic: set[str] = set()
        lustre, short, rate, after = 1.0, None, 0.0, None
        not_ready: set[str] = set()
        drifts: list[tuple[float, float | None]] = []
        gpu: list[Fault] = []
        in_use: dict[str, float] = {}
        down: set[str] = set()
        slow: set[str] = set()
        slow_init: str | None = None
        for active in faults:
            if pool is not None and active.pool != pool:
                continue
            f = active.fault
            if f.kind == "fabric-down":
                fabric_down = True
                busbw = f.busbw_gbps if f.busbw_gbps is not None else busbw
            elif f.kind == "bad-node":
                (nic if f.nic else degraded).add(f.node or "")
            elif f.kind == "lustre-slow":
                lustre = min(lustre, f.factor if f.factor is not None else SLOW_LUSTRE_FACTOR)
            elif f.kind == "capacity-short":
                short = f.machines if f.machines is not None else -1
            elif f.kind == "api-errors":
                rate = max(rate, f.rate or 0.0)
                after = f.after if after is None else min(after, f.after or 0)
            elif f.kind == "not-ready":
                not_ready.add(f.node or "")
            elif f.kind == "drift":
                drifts.append((f.percent or 0.0, active.since))
            elif f.kind == "subblock-down":
                down.add(f.place or "")
            elif f.kind == "block-slow":
                slow.add(f.place or "")
            elif f.kind == "nccl-slow-init":
                slow_init = f.phase
            if f.kind in GPU_FAULT_KINDS or f.kind in DCGM_FAULT_KINDS:
                gpu.append(f)
            if f.kind == "dcgm-in-use":
                until = math.inf if active.since is None else active.since + IN_USE_HOLD_S
                in_use[f.node or ""] = max(in_use.get(f.node or "", -math.inf), until)
            if f.kind == "thermal-throttle":  # a slow node, as a bad node is
                degraded.add(f.node or "")
        return cls(
            fabric_down=fabric_down,
            socket_busbw_gbps=busbw,
            degraded_nodes=frozenset(degraded),
            nic_down_nodes=frozenset(nic),
            lustre_factor=lustre,
            capacity_short=short,
            api_error_rate=rate,
            api_errors_after=after or None,
            not_ready_nodes=frozenset(not_ready),
            drifts=tuple(drifts),
            gpu_faults=tuple(dict.fromkeys(gpu)),
            in_use_until=tuple(sorted(in_use.items())),
            down_subblocks=frozenset(down),
            slow_blocks=frozenset(slow),
            slow_init=slow_init,
        )

    def gpu_faults_of(self, node: str, at: float | None = None) -> tuple[Fault, ...]:
        """The GPU and DCGM faults in force on ``node``, as injected (none: a healthy node).
        With ``at`` (a time on the sim's clock: when the check runs), a ``dcgm-in-use`` whose
        hold ended by then (``IN_USE_HOLD_S`` after it was put in force) is left out."""
        ended = at is not None and at >= dict(self.in_use_until).get(node, math.inf)
        return tuple(
            f for f in self.gpu_faults if f.node == node and not (ended and f.kind == "dcgm-in-use")
        )

    def busbw_decay(self, nights_since: Callable[[float | None], int]) -> float:
        """The share of bus bandwidth the ``drift`` faults leave tonight; ``nights_since(t)``
        counts the pool's nights since time ``t`` (tonight included)."""
        decay = 1.0
        for percent, since in self.drifts:
            decay *= drift_factor(percent, nights_since(since))
        return decay

    def rdma_lost(self, nodes: Iterable[str]) -> list[str]:
        """Why RDMA is unusable for ranks on ``nodes`` (empty: it is usable)."""
        reasons = ["the pool's RDMA fabric is down"] if self.fabric_down else []
        reasons += [f"the RDMA NIC of {n} is down" for n in nodes if n in self.nic_down_nodes]
        return reasons
