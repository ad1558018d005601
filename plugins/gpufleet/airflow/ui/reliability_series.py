"""``/metrics``' reliability series (``services.views.reliability``): per pool, histograms of the
time to repair and the time between incidents of its nodes over the window, and a gauge of its
incidents still open, written as ``prometheus_client.generate_latest`` writes them.

The histograms are of the window (the last ``WINDOW`` up to the scrape), read afresh from the
ledger each scrape: they may go down as incidents leave the window, so read them as they are
(``histogram_quantile`` over ``_bucket``, ``_sum / _count``), not with ``rate()``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from gpufleet.airflow.ui.exposition import Exposition, Labels

if TYPE_CHECKING:
    from gpufleet.services.views.reliability import ReliabilityWindow

_MIN, _HOUR, _DAY = 60.0, 3600.0, 86400.0
# minutes to weeks: a retest that releases a node the same hour, to a repair that takes weeks
BUCKETS: tuple[float, ...] = (
    5 * _MIN,
    15 * _MIN,
    30 * _MIN,
    _HOUR,
    4 * _HOUR,
    12 * _HOUR,
    _DAY,
    3 * _DAY,
    7 * _DAY,
    14 * _DAY,
    30 * _DAY,
)
REPAIR = "gpufleet_node_time_to_repair_seconds"
BETWEEN = "gpufleet_node_time_between_incidents_seconds"
OPEN = "gpufleet_node_open_incidents"
_HELP = {
    REPAIR: "Time to repair of the pool's node incidents that ended in the window (seconds).",
    BETWEEN: "Time between a node's incidents, of those that started in the window (seconds).",
}


def open_incidents(
    out: Exposition, pools: Iterable[tuple[str, str]], window: ReliabilityWindow
) -> None:
    """The gauge of open incidents of each pool of ``pools`` (0 when it has none)."""
    for cluster, pool in pools:
        got = window.pools.get((cluster, pool))
        out.gauge(
            OPEN,
            "Incidents of the pool's nodes still open: out of service, not released again.",
            Labels(cluster=cluster, pool=pool).text,
            len(got.open) if got is not None else 0,
        )


def histograms(window: ReliabilityWindow, number: Exposition) -> bytes:
    """Both histogram families, a series per pool with observations in the window."""
    out = []
    for name, values_of in (
        (REPAIR, lambda r: r.repair_seconds),
        (BETWEEN, lambda r: r.between_seconds),
    ):
        lines = []
        for (cluster, pool), r in sorted(window.pools.items()):
            values = values_of(r)
            if not values:
                continue
            labels = Labels(cluster=cluster, pool=pool)
            for bound in (*BUCKETS, float("inf")):
                count = sum(1 for v in values if v <= bound)
                le = "+Inf" if bound == float("inf") else number.number_text(bound)
                lines.append(
                    f"{name}_bucket{labels.plus('le', le)} {number.number_text(float(count))}\n"
                )
            lines.append(f"{name}_count{labels.text} {number.number_text(float(len(values)))}\n")
            lines.append(f"{name}_sum{labels.text} {number.number_text(float(sum(values)))}\n")
        if lines:
            out.append(f"# HELP {name} {_HELP[name]}\n# TYPE {name} histogram\n")
            out.extend(lines)
    return "".join(out).encode("utf-8")
