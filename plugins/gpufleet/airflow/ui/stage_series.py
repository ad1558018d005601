"""``/metrics``' stage histograms (issue 35): how long each stage of a validation pod's life took
(``domain.stages``), over the last validation of each kind of every pool, fleet-wide, one
histogram per kind and stage, written as ``prometheus_client.generate_latest`` writes them.

One observation per pod: a pair's launcher (``details.stages.pairs``), a checked node's health
pod (``details.nodes.<node>.stages``), a fio client (``details.stages.nodes``). Fleet-wide, not
per pool, so the series stay a few hundred at any fleet size; a pool's own figures are on its
page. Read them as they are (``histogram_quantile`` over ``_bucket``, ``_sum / _count``): the
rows are each pool's latest, not a counter that only grows.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from gpufleet.airflow.ui.exposition import Exposition, Labels
from gpufleet.domain.stages import BUCKETS_S, ordered
from gpufleet.domain.validation_kinds import ValidationKind

NAME = "gpufleet_validation_stage_seconds"
HELP = (
    "Seconds each stage of a validation pod's life took (scheduled, image_pull, "
    "container_start, gang, nccl_init, sweep, diag_r<N>, io, teardown), one observation per "
    "pod of each pool's last validation of the kind."
)

Observations = dict[tuple[str, str], list[float]]  # (kind, stage) -> seconds


def _stage_maps(row: Mapping[str, Any]) -> Iterable[Mapping[str, Any]]:
    """Each pod's seconds per stage a ledger row's details hold."""
    raw = row.get("details")
    details: dict[str, Any] = raw if isinstance(raw, dict) else {}
    raw = details.get("stages")
    stages: dict[str, Any] = raw if isinstance(raw, dict) else {}
    if row.get("kind") == ValidationKind.FABRIC:
        for pair in stages.get("pairs") or ():
            if isinstance(pair, dict) and isinstance(pair.get("stages"), dict):
                yield pair["stages"]
    elif row.get("kind") == ValidationKind.HEALTH:
        nodes = details.get("nodes")
        for check in nodes.values() if isinstance(nodes, dict) else ():
            if isinstance(check, dict) and isinstance(check.get("stages"), dict):
                yield check["stages"]
    else:
        nodes = stages.get("nodes")
        for pod in nodes.values() if isinstance(nodes, dict) else ():
            if isinstance(pod, dict):
                yield pod


def observe(rows: Iterable[Mapping[str, Any]], into: Observations | None = None) -> Observations:
    """The rows' pods' stage seconds by (kind, stage); figures that are not finite numbers
    are left out (details are read defensively)."""
    out: Observations = into if into is not None else {}
    for row in rows:
        kind = str(row.get("kind"))
        for stages in _stage_maps(row):
            for stage, value in stages.items():
                if isinstance(value, bool) or not isinstance(value, int | float):
                    continue
                if math.isfinite(value):
                    out.setdefault((kind, str(stage)), []).append(float(value))
    return out


def histograms(observations: Observations, number: Exposition) -> bytes:
    """The histogram family, a series per (kind, stage) with observations."""
    if not observations:
        return b""
    lines = [f"# HELP {NAME} {HELP}\n# TYPE {NAME} histogram\n"]
    for kind in sorted({k for k, _ in observations}):
        for stage in ordered(s for k, s in observations if k == kind):
            values = observations[(kind, stage)]
            labels = Labels(kind=kind, stage=stage)
            for bound in (*BUCKETS_S, math.inf):
                count = sum(1 for v in values if v <= bound)
                le = "+Inf" if bound == math.inf else number.number_text(float(bound))
                lines.append(
                    f"{NAME}_bucket{labels.plus('le', le)} {number.number_text(float(count))}\n"
                )
            lines.append(f"{NAME}_count{labels.text} {number.number_text(float(len(values)))}\n")
            lines.append(f"{NAME}_sum{labels.text} {number.number_text(float(sum(values)))}\n")
    return "".join(lines).encode("utf-8")
