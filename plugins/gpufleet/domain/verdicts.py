"""Verdicts: does a node pair's fabric, or a pool's filesystem, do what it was bought for?

Pure domain code. Every verdict carries its reasons in words. Performance is part of
correctness: a pair passes only when

- NCCL used the pool's expected transport (a silent fallback to sockets fails, whatever the
  bandwidth), with GPUDirect RDMA where the hardware supports it,
- no result was wrong (``#wrong`` is 0; unchecked results fail closed),
- bus bandwidth on the large-message plateau reaches ``tolerance x baseline`` (never the
  footer average, which hides the plateau), and
- small-message latency (the time column up to 64 KiB) is within the baseline's bound: on
  fast links TCP can come close in bandwidth while its latency is many times worse.
"""

from __future__ import annotations

import statistics
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from gpufleet.domain.baselines import SMALL_MESSAGE_BYTES, Baseline
from gpufleet.domain.nodes import max_quarantined

MIB = 2**20


@dataclass(frozen=True)
class PairVerdict:
    nodes: tuple[str, str]
    passed: bool
    reasons: tuple[str, ...]
    transport: str | None = None
    gdrdma: bool | None = None
    busbw_gbps: float | None = None  # mean busbw over the large-message sizes
    small_latency_us: float | None = None  # median time over messages up to 64 KiB
    wrong: int | None = None
    nccl_version: str | None = None

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> PairVerdict:
        """The verdict ``as_row`` recorded (a pair row of the ledger or of a task's state)."""
        return cls(
            nodes=(row["node_a"], row["node_b"]),
            passed=row["passed"],
            reasons=tuple(row["reasons"]),
            transport=row["transport"],
            gdrdma=row["gdrdma"],
            busbw_gbps=row["busbw_gbps"],
            small_latency_us=row["small_latency_us"],
            wrong=row["wrong"],
            nccl_version=row["nccl_version"],
        )

    def as_row(self, pass_no: int) -> dict[str, Any]:
        return {
            "pass_no": pass_no,
            "node_a": self.nodes[0],
            "node_b": self.nodes[1],
            "passed": self.passed,
            "transport": self.transport,
            "gdrdma": self.gdrdma,
            "busbw_gbps": self.busbw_gbps,
            "small_latency_us": self.small_latency_us,
            "wrong": self.wrong,
            "nccl_version": self.nccl_version,
            "reasons": list(self.reasons),
        }


def judge_pair(  # noqa: C901  one branch per way a pair can fail or not be judged
    nodes: tuple[str, str],
    *,
    run: Any | None,
    log: Any | None,
    expected_transport: str,
    expect_gdrdma: bool,
    baseline: Baseline | None,
    tolerance: float,
    failure: str | None = None,
) -> PairVerdict:
    """Judge one 2-node nccl-tests run (``run``: a parsed NcclRun, ``log``: NcclLogInfo)."""
    reasons: list[str] = []
    transport = getattr(log, "transport", None)
    gdrdma = getattr(log, "gdrdma", None)
    version = getattr(log, "nccl_version", None)
    if failure:
        reasons.append(failure)
    # contradictory init lines (a rank beyond its communicator, nNodes 0, ...)
    reasons.extend(
        f"the NCCL log cannot be trusted: {p}" for p in (getattr(log, "problems", ()) or ())
    )
    if log is None:
        reasons.append("no NCCL INFO log was collected, so the transport is unknown")
    elif transport != expected_transport:
        name = getattr(log, "network_name", None)
        shown = f"{transport} ({name})" if name and name.lower() != transport else transport
        reasons.append(
            f"NCCL used {shown} instead of the expected {expected_transport}"
            + (": a silent fallback to TCP sockets" if transport in ("socket", "ofi-tcp") else "")
        )
    elif expect_gdrdma and gdrdma is not True:
        reasons.append(
            "GPUDirect RDMA was not used"
            if gdrdma is False
            else "the NCCL log does not show whether GPUDirect RDMA was used"
        )
    busbw = latency = wrong = None
    if run is None:
        reasons.append("no nccl-tests results were collected")
    else:
        wrong = run.wrong
        problems = tuple(getattr(run, "problems", ()) or ())
        if problems:  # refused rows, sizes out of order, a cut-off table: figures not trusted
            reasons.extend(f"nccl-tests output cannot be trusted: {p}" for p in problems)
        elif getattr(run, "truncated", False):
            reasons.append("the nccl-tests output is truncated")
        if wrong is None:
            reasons.append("results were not checked (#wrong is N/A): correctness unknown")
        elif wrong:
            reasons.append(f"{wrong} wrong results (#wrong): data corruption on the path")
        if baseline is None:
            reasons.append(
                f"no baseline for this shape and transport {expected_transport!r} in "
                "include/baselines.yaml: cannot judge bandwidth"
            )
        else:
            large = run.busbw_at_or_above(baseline.large_message_bytes)
            if not large:
                reasons.append(
                    f"no message size of at least {baseline.large_message_bytes // MIB} MiB "
                    "was tested: cannot judge the bandwidth plateau"
                )
            else:
                busbw = statistics.fmean(large)
                floor = tolerance * baseline.busbw_gbps
                if busbw < floor:
                    reasons.append(
                        f"large-message bus bandwidth {busbw:.1f} GB/s is below {floor:.1f} GB/s "
                        f"({tolerance:.0%} of the {baseline.busbw_gbps:g} GB/s baseline)"
                    )
            small = [t for _, t in run.latency_up_to(SMALL_MESSAGE_BYTES) if t is not None]
            if not small:
                reasons.append("no message of 64 KiB or less was tested: latency unknown")
            else:
                latency = statistics.median(small)
                if latency > baseline.small_latency_us_max:
                    reasons.append(
                        f"small-message latency {latency:.1f} us exceeds the "
                        f"{baseline.small_latency_us_max:g} us bound"
                    )
    passed = not reasons
    if passed:
        reasons.append(
            f"{transport}{' with GDRDMA' if gdrdma else ''}, {busbw:.1f} GB/s busbw, "
            f"{latency:.1f} us small-message latency, 0 wrong"
        )
    return PairVerdict(
        nodes, passed, tuple(reasons), transport, gdrdma, busbw, latency, wrong, version
    )


@dataclass(frozen=True)
class StorageVerdict:
    passed: bool
    reasons: tuple[str, ...]
    read_mb_s: float | None
    write_mb_s: float | None
    expected_mb_s: float
    floor_mb_s: float


def judge_storage(
    results: list[Any],
    *,
    expected_mb_s: float,
    tolerance: float,
    failure: str | None = None,
    clients: tuple[int, int] | None = None,
) -> StorageVerdict:
    """Sum per-client fio/IOR results (MiB/s) and compare with ``tolerance x tier x capacity``.

    ``clients`` ``(n, saturating)``: the results come from ``n`` clients where ``saturating``
    drive the whole tier, each a ``1/saturating`` share; ``n`` of them are held to ``n`` shares
    (``StorageVerdict.expected_mb_s`` is then that figure)."""
    tier = expected_mb_s
    share_text = ""
    if clients is not None:
        n, saturating = clients
        if not 1 <= n <= saturating:
            raise ValueError(f"clients must be 1 to {saturating} of {saturating}, not {n}")
        if n < saturating:
            expected_mb_s = tier * n / saturating
            share_text = f"{n} of {saturating} clients' share of the {tier:,.0f} MB/s "
    floor = tolerance * expected_mb_s
    of = f"{expected_mb_s:,.0f} MB/s: {share_text}" if share_text else "the "
    reasons: list[str] = [failure] if failure else []
    read = write = None
    if not results and not failure:
        reasons.append("no fio results were collected")
    if results:
        # a job that reported an error, or a figure the parser refused, is not counted: the
        # total would understate (or, refused, misstate) what the filesystem delivers
        for problem in (p for r in results for p in (getattr(r, "problems", ()) or ())):
            reasons.append(f"storage benchmark output cannot be trusted: {problem}")
        reads = [r.read_mib_s for r in results]
        writes = [r.write_mib_s for r in results]
        read = sum(reads) * MIB / 1e6 if all(v is not None for v in reads) else None
        write = sum(writes) * MIB / 1e6 if all(v is not None for v in writes) else None
        for label, value in (("read", read), ("write", write)):
            if value is None:
                reasons.append(f"{label} throughput is missing from the results")
            elif value < floor:
                reasons.append(
                    f"{label} throughput {value:,.0f} MB/s is below {floor:,.0f} MB/s "
                    f"({tolerance:.0%} of {of}"
                    f"{'' if share_text else f'{tier:,.0f} MB/s '}tier x capacity)"
                )
    passed = not reasons
    if passed:
        reasons.append(
            f"read {read:,.0f} MB/s and write {write:,.0f} MB/s reach {floor:,.0f} MB/s "
            f"({tolerance:.0%} of {expected_mb_s:,.0f} MB/s"
            f"{f': {share_text}tier x capacity' if share_text else ''})"
        )
    return StorageVerdict(passed, tuple(reasons), read, write, expected_mb_s, floor)


@dataclass
class PoolFabricVerdict:
    """The pool's fabric verdict after pass 1 and localization."""

    passed: bool
    state: str  # validated | degraded
    reasons: list[str] = field(default_factory=list)
    quarantine: dict[str, str] = field(default_factory=dict)  # node -> reason
    page: bool = False  # a human must look: fabric problem, not node problem


def judge_pool(  # noqa: PLR0913  keyword-only inputs of one pool's verdict
    *,
    pool_nodes: int,
    tested: list[str],
    pass1: list[PairVerdict],
    bad: dict[str, str],
    inconclusive: list[str],
    untested: list[str],
    max_quarantine_share: float,
    expected_transport: str,
    already_out: Collection[str] = (),
    unhealthy: dict[str, str] | None = None,
) -> PoolFabricVerdict:
    """Combine pair verdicts into the pool's: localized bad nodes, and the nodes whose GPU
    health check failed (``unhealthy``: node -> why), are quarantined, unless the pool would
    then have more than ``max(1, floor(share x nodes))`` quarantined at once (``already_out``
    counts: nodes still quarantined), which is a fleet problem rather than a node's: nothing is
    quarantined, the pool is degraded and a human paged. One bad node is always allowed, so a
    small pool keeps its other nodes in service."""
    unhealthy = dict(unhealthy or {})
    bad = {**bad, **unhealthy}
    failed = [v for v in pass1 if not v.passed]
    reasons: list[str] = []
    if not tested:
        return PoolFabricVerdict(False, "degraded", ["no idle node could be tested"], page=True)
    fallback = sorted(
        {v.transport or "unknown" for v in pass1 if v.transport != expected_transport}
    )
    if failed and len(failed) == len(pass1) and not bad:
        reasons.append(
            f"every pair failed ({len(failed)} of {len(pass1)}): a fabric problem, "
            "not a node problem"
        )
        if fallback:
            reasons.append(
                f"transport observed: {', '.join(fallback)} (expected {expected_transport})"
            )
        reasons += [f"{'/'.join(v.nodes)}: {v.reasons[0]}" for v in failed[:3]]
        return PoolFabricVerdict(False, "degraded", reasons, page=True)
    limit = max_quarantined(pool_nodes, max_quarantine_share)
    out_after = set(bad) | set(already_out)
    if bad and len(out_after) > limit:
        reasons.append(
            f"{len(bad)} of {pool_nodes} nodes failed with known-good partners"
            + (f" or on their GPU health check ({len(unhealthy)})" if unhealthy else "")
            + (
                f" ({len(set(already_out) - set(bad))} more already quarantined)"
                if set(already_out) - set(bad)
                else ""
            )
            + f", more than the {limit} ({max_quarantine_share:.0%}, at least one) that may "
            "be quarantined at once: quarantining nothing, paging a human (fabric problem, "
            "not node problem)"
        )
        reasons += [f"{node}: {why}" for node, why in sorted(bad.items())]
        return PoolFabricVerdict(False, "degraded", reasons, page=True)
    if inconclusive:
        reasons.append(
            f"could not localize {', '.join(sorted(inconclusive))}: not enough known-good "
            "partners to test against"
        )
        return PoolFabricVerdict(False, "degraded", reasons, page=True)
    for node, why in sorted(bad.items()):
        if node in unhealthy:
            reasons.append(f"{node} quarantined: GPU {why}")
        else:
            reasons.append(f"{node} quarantined: failed with two known-good partners ({why})")
    for v in failed:
        if not set(v.nodes) & set(bad):
            reasons.append(
                f"{'/'.join(v.nodes)} failed in pass 1 but both nodes passed with "
                "known-good partners: flaky, watched"
            )
    if untested:
        reasons.append(f"not tested (no known-good partner): {', '.join(untested)}")
    passing = [v for v in pass1 if v.passed]
    if passing:
        low = min(v.busbw_gbps or 0 for v in passing)
        reasons.append(
            f"{len(tested) - len(bad)} nodes on {expected_transport}; lowest pair "
            f"busbw {low:.1f} GB/s"
        )
    return PoolFabricVerdict(True, "validated", reasons, quarantine=dict(bad))


def latest_per_check(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (cluster, pool, kind): the last recorded (rows in insertion order), so a
    retry's verdict supersedes the error its failed attempt recorded."""
    latest: dict[tuple[str, str, str], dict[str, Any]] = {}
    for r in rows:
        latest.pop((r["cluster"], r["pool"], r["kind"]), None)
        latest[(r["cluster"], r["pool"], r["kind"])] = r
    return list(latest.values())
