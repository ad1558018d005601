"""The series ``/metrics`` writes for one pool (``metrics.py`` says what each is): those the
ledger alone decides (``pool_series``: a cluster's are kept between scrapes while its ledger
version stays, ``metrics.SeriesMemo``), and those of the scrape's time (``time_series``: whether
the gate would launch now, each validation's age)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from gpufleet.airflow.ui.exposition import Exposition, Labels
from gpufleet.domain.validation_kinds import ValidationKind


def pool_series(out: Exposition, v: Any, latest: dict, quarantined: int) -> None:
    """The ledger's series of one pool's verdict ``v`` (``services.views.fleet.PoolVerdict``):
    its state, nodes quarantined and out of service, and its last validation of each kind
    (``latest``: its cluster's (pool, kind) -> row)."""
    from gpufleet.services.views.fleet import DRIFTING

    gauge = out.gauge
    pool = v.ref.pool.name
    at = Labels(cluster=v.ref.cluster.name, pool=pool)
    gauge(
        "gpufleet_pool_drifting",
        "1 when the pool's figures drift from its own history (state drifting)",
        at.text,
        int(v.state == DRIFTING),
    )
    gauge(
        "gpufleet_quarantined_nodes", "nodes of the pool quarantined (ledger)", at.text, quarantined
    )
    for state, count in sorted(v.out_of_service.items()):
        gauge(
            "gpufleet_out_of_service_nodes",
            "nodes of the pool out of service, by lifecycle state",
            at.plus("state", state),
            count,
        )
    for kind in ValidationKind:
        row = latest.get((pool, kind))
        if row is not None:
            validation_series(out, at, row)


READY = (
    "gpufleet_pool_ready",
    "1 when the gate would launch on the pool now (the readiness table's rules)",
)
AGE = (
    "gpufleet_validation_age_seconds",
    "seconds since the pool's last validation of this kind finished",
)


def time_prefixes(v: Any, latest: dict) -> tuple[str, list[tuple[str, datetime]]]:
    """What one pool's series of the scrape's time keep from the ledger: the ready sample's
    name and labels, and each kind's age sample's with the time its validation finished."""
    at = Labels(cluster=v.ref.cluster.name, pool=v.ref.pool.name)
    ages = []
    for kind in ValidationKind:
        row = latest.get((v.ref.pool.name, kind))
        if row is not None and row.get("finished_at") is not None:
            ages.append((f"{AGE[0]}{at.plus('kind', kind)} ", row["finished_at"]))
    return f"{READY[0]}{at.plus('region', v.ref.region.name)} ", ages


def time_series(
    out: Exposition, verdicts: list, prefixes: list[tuple[str, list]], now: datetime
) -> None:
    """The series of the scrape's time ``now`` of ``verdicts`` (``prefixes``: theirs, in the
    same order): ready (the gate's rules: a validation past its age refuses) and the age of
    each pool's last validation of each kind."""
    ready, ages = [], []
    go = out.number_text
    for v, (ready_at, timed) in zip(verdicts, prefixes, strict=True):
        ready.append(ready_at + ("1.0\n" if v.ready else "0.0\n"))
        for age_at, finished in timed:
            ages.append(age_at + go((now - finished).total_seconds()) + "\n")
    out.extend({READY[0]: (READY[1], ready), AGE[0]: (AGE[1], ages)})


def validation_series(out: Exposition, at: Labels, row: dict) -> None:
    """The series of the pool's last validation of one kind (``row``) but its age (a series of
    the scrape's time, ``time_series``); ``at``: the pool's labels (cluster, pool)."""
    gauge = out.gauge
    kind = row["kind"]
    labels = at.plus("kind", kind)
    raw = row.get("details")
    details = raw if isinstance(raw, dict) else {}
    gauge(
        "gpufleet_validation_passed",
        "1 when the pool's last validation of this kind passed",
        labels,
        int(row["passed"] is True),
    )
    gauge(
        "gpufleet_validation_error",
        "1 when the pool's last validation of this kind could not finish",
        labels,
        int(row.get("verdict") == "error"),
    )
    gauge(
        "gpufleet_validation_gpu_minutes",
        "GPU-minutes the pool's last validation of this kind held (its pods' run times)",
        labels,
        details.get("gpu_minutes"),
    )
    gauge(
        "gpufleet_validation_gpu_minutes_per_node",
        "GPU-minutes per node tested of the pool's last validation of this kind",
        labels,
        details.get("gpu_minutes_per_node"),
    )
    if kind == ValidationKind.FABRIC:
        gauge(
            "gpufleet_fabric_busbw_gbps",
            "lowest large-message all-reduce bus bandwidth of the pool's good pairs",
            at.text,
            row.get("busbw_gbps"),
        )
        gauge(
            "gpufleet_fabric_baseline_gbps",
            "the baseline the pool's bus bandwidth is judged against",
            at.text,
            row.get("baseline_gbps"),
        )
        gauge(
            "gpufleet_fabric_small_latency_us",
            "median small-message latency of the pool's passing pairs",
            at.text,
            details.get("small_latency_us"),
        )
        if row.get("transport"):
            gauge(
                "gpufleet_fabric_transport_ok",
                "1 when NCCL used the pool's expected transport",
                at.text,
                int(row["transport"] == row.get("expected_transport")),
            )
        _subblocks(out, at, details)
    elif kind == ValidationKind.HEALTH:
        _health(out, at, row)
    elif kind == ValidationKind.STORAGE:
        for name, column, what in (
            ("read_mb_s", "read_mb_s", "aggregate fio read throughput"),
            ("write_mb_s", "write_mb_s", "aggregate fio write throughput"),
            ("expected_mb_s", "expected_mb_s", "the tier x capacity expected"),
        ):
            gauge(f"gpufleet_lustre_{name}", f"{what} (MB/s)", at.text, row.get(column))
    findings = details.get("drift")
    for finding in findings if isinstance(findings, list) else ():
        if not isinstance(finding, dict) or not isinstance(finding.get("metric"), str):
            continue
        where = at.plus("metric", finding["metric"])
        for figure, what in (
            ("latest", "tonight's figure of a drifting metric"),
            ("median", "the metric's median over the pool's recent passing nights"),
            ("noise", "the noise of that history, in the metric's unit"),
            ("limit", "the figure beyond which the metric counts as drifting"),
        ):
            gauge(f"gpufleet_drift_{figure}", what, where, finding.get(figure))


def _subblocks(out: Exposition, at: Labels, details: dict) -> None:
    """The provider's view of the pool's sub-blocks beside our verdict on each, from the
    pool's last fabric row (``details``): nothing when it holds no view, ``read_ok`` 0
    alone when the provider could not be read."""
    from gpufleet.services.views.racks import subblock_rows

    view = details.get("provider_subblocks")
    if not isinstance(view, list | dict):
        return
    out.gauge(
        "gpufleet_subblock_provider_read_ok",
        "1 when the pool's last fabric validation read the provider's view of its "
        "sub-blocks, 0 when it could not",
        at.text,
        int(isinstance(view, list)),
    )
    if not isinstance(view, list):
        return
    for row in subblock_rows(details):
        where = Labels(block=row["block"], subblock=row["subblock"])
        pairs = sorted(zip([*at.names, *where.names], [*at.parts, *where.parts], strict=True))
        labels = "{" + ",".join(part for _, part in pairs) + "}"
        out.gauge(
            "gpufleet_subblock_provider_healthy_hosts",
            "hosts of the sub-block the provider reports healthy (pool's last fabric row)",
            labels,
            row["healthy_hosts"],
        )
        out.gauge(
            "gpufleet_subblock_provider_degraded_hosts",
            "hosts of the sub-block the provider reports degraded (pool's last fabric row)",
            labels,
            row["degraded_hosts"],
        )
        out.gauge(
            "gpufleet_subblock_bad",
            "1 when the pool's last fabric validation found the sub-block's uplink bad "
            "(taken out as a unit), else 0",
            labels,
            int(row["ours"] is not None),
        )


def _health(out: Exposition, at: Labels, row: dict) -> None:
    """The pool's last GPU health check (``services.views.health.health_summary``): nodes
    checked, per ``dcgmi diag`` level, and the unhealthy ones per action (every action but
    healthy, 0 included, so an alert on ``> 0`` sees the series). A check that could not
    finish says nothing about nodes."""
    from gpufleet.services.views.health import UNHEALTHY_ACTIONS, health_summary

    if row.get("verdict") == "error":
        return
    gauge = out.gauge
    summary = health_summary(row, row["finished_at"])  # its age is no series here
    assert summary is not None  # None only for no row
    gauge(
        "gpufleet_health_nodes_checked",
        "nodes the pool's last GPU health check covered",
        at.text,
        summary["nodes_checked"],
    )
    for level, nodes in summary["levels"].items():
        gauge(
            "gpufleet_health_level_nodes",
            "nodes that ran this dcgmi diag level in the pool's last GPU health check",
            at.plus("level", str(level)),
            nodes,
        )
    for action, count in {**dict.fromkeys(UNHEALTHY_ACTIONS, 0), **summary["actions"]}.items():
        gauge(
            "gpufleet_health_unhealthy_nodes",
            "nodes the pool's last GPU health check found unhealthy, by the action taken",
            at.plus("action", action),
            count,
        )
