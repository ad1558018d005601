"""The fabric validation by scope: pass 1 planned inside sub-blocks and across
them (``domain.topology.plan_by_scope``), read by scope (``judge_scopes``), and a bad sub-block
taken out of service as a unit.

Design: docs/design/topology.md.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from gpufleet.backends.base import CloudBackend, NodeInfo
from gpufleet.domain.nodes import NodeState
from gpufleet.domain.remediation import REPORT_SUBBLOCK
from gpufleet.domain.topology import Place, ScopedPlan, ScopeVerdict, judge_scopes, place_of
from gpufleet.domain.topology import plan_by_scope as _plan
from gpufleet.domain.verdicts import PoolFabricVerdict
from gpufleet.errors import GpufleetError
from gpufleet.services.nodes.lifecycle import NodeLifecycle
from gpufleet.store.nodes import NodeMove

if TYPE_CHECKING:
    from gpufleet.services.validation.fabric_state import FabricState

SUBBLOCK_EVIDENCE = "subblock"
OUT_FOR_A_UNIT = ["quarantined", "retesting"]  # the states a sub-block's nodes wait in


def places_of(nodes: Iterable[NodeInfo]) -> dict[str, str | None]:
    """Each node's ``block/sub-block`` key from its labels (None: no topology labels)."""
    out: dict[str, str | None] = {}
    for node in nodes:
        place = place_of(node.labels)
        out[node.name] = place.key if place else None
    return out


def _place(key: str | None) -> Place | None:
    if not key:
        return None
    block, _, subblock = key.partition("/")
    return Place(block, subblock)


def plan(
    places: Mapping[str, str | None],
    nodes: Iterable[str],
    rank: Mapping[str, int] | None = None,
) -> ScopedPlan:
    """Pass 1 over ``nodes`` by scope (flat when any node has no place, or one sub-block),
    nodes of one ``rank`` paired together where they can be (``plan_by_scope``)."""
    return _plan({n: _place(places.get(n)) for n in nodes}, rank)


@dataclass(frozen=True)
class ScopeOutcome:
    """Pass 1 read by scope: the verdict, the nodes of bad sub-blocks, the pass-1 rows the
    scopes explain (indexes), and per scope how many pairs ran and failed."""

    verdict: ScopeVerdict
    out: dict[str, str]  # node -> its bad sub-block's key
    counts: dict[str, dict[str, int]]

    @property
    def explained(self) -> frozenset[int]:
        return self.verdict.explained

    def details(self) -> dict[str, Any]:
        """What the fabric row records in ``details`` per scope."""
        return {
            "scopes": self.counts,
            "bad_subblocks": dict(self.verdict.bad_subblocks),
            "slow_blocks": dict(self.verdict.slow_blocks),
        }


def read_pass1(
    places: Mapping[str, str | None],
    nodes: list[str],
    rows: list[dict[str, Any]],
    rank: Mapping[str, int] | None = None,
) -> ScopeOutcome:
    """Judge pass 1's ``rows`` (in plan order: planned with ``rank``) over ``nodes`` by scope."""
    scoped = plan(places, nodes, rank)
    rows = [r for r in rows if r.get("pass_no", 1) == 1]
    passed = [bool(r["passed"]) for r in rows]
    if len(passed) != len(scoped.pairs):  # not the plan these rows ran: nothing to say
        return ScopeOutcome(ScopeVerdict({}, {}, frozenset()), {}, {})
    verdict = judge_scopes(scoped, passed)
    counts: dict[str, dict[str, int]] = {}
    ran, failed = (
        Counter(scoped.scopes),
        Counter(s for s, ok in zip(scoped.scopes, passed, strict=True) if not ok),
    )
    for scope in sorted(ran):
        counts[scope] = {"pairs": ran[scope], "failed": failed[scope]}
    out = {
        node: key
        for node, key in places.items()
        if key is not None and key in verdict.bad_subblocks
    }
    return ScopeOutcome(verdict, out, counts)


def subblock_reason(key: str, why: str) -> str:
    return f"sub-block {key} taken out as a unit: {why}"


def unit_retests(rows: Mapping[str, Mapping[str, Any]], retest: list[str]) -> list[str]:
    """The retested nodes that are out for their sub-block (``rows``: node -> ledger row)."""
    return [n for n in retest if SUBBLOCK_EVIDENCE in ((rows.get(n) or {}).get("evidence") or {})]


def provider_view(cloud: CloudBackend, pool: str) -> list[dict[str, Any]] | dict[str, str]:
    """The provider's health of the pool's sub-blocks (``CloudBackend.subblock_health``), as
    the fabric row records it beside our verdicts; what stopped the read, else."""
    try:
        return [h.to_dict() for h in cloud.subblock_health(pool)]
    except GpufleetError as e:
        return {"error": str(e)}


def report_subblock(
    cloud: CloudBackend, pool: str, key: str, why: str, nodes: list[str], busy: Iterable[str]
) -> str:
    """Report a bad sub-block to the provider (``report_faulty_subblock``: GKE's reportFaulty
    disrupts every VM of the sub-block at once, so only a rack no job runs on is reported; a
    later night reports it once its jobs are gone); the sentence for the verdict's reasons."""
    running = sorted(set(nodes) & set(busy))
    if running:
        return f"not reported to the provider yet: jobs run on {', '.join(running)}"
    try:
        ensured = cloud.report_faulty_subblock(pool, key, f"gpufleet: {why}")
    except GpufleetError as e:
        return f"could not be reported to the provider: {e}"
    if ensured.action == "unsupported":
        return f"not reported: {ensured.detail.get('why', 'the provider has no such call')}"
    return f"reported to the provider ({ensured.action})"


def request_report(  # noqa: PLR0913  the sub-block's facts
    lifecycle: NodeLifecycle,
    cloud: CloudBackend,
    state: FabricState,
    key: str,
    why: str,
    members: list[str],
) -> str:
    """A bad sub-block is reported to the provider only with a person's approval (it disrupts
    every VM on the rack; docs/remediation.md#approvals): an approved request is reported now
    (``report_subblock``: not while jobs run on it), else one request is recorded for the
    ``remediation_approvals`` DAG to ask (not again while one is open, nor within the ladder's
    window once a person said no). The sentence for the verdict's reasons."""
    ledger = lifecycle.ledger
    cluster = lifecycle.ref.cluster.name
    where = f"{cluster}/{state.pool}/{key}"
    approved = ledger.open_approval(REPORT_SUBBLOCK, where)
    if approved is not None and approved["state"] == "approved":
        told = report_subblock(cloud, state.pool, key, why, members, state.busy)
        if told.startswith("reported"):
            ledger.approval_done(approved["id"], told)
        return f"{told} (approved by {approved['answered_by']})"
    request, _ = ledger.request_approval(
        REPORT_SUBBLOCK,
        where,
        f"Report sub-block {key} of {cluster}/{state.pool} faulty to the provider? {why}",
        requested_by=state.run_id,
        detail={
            "cluster": cluster,
            "pool": state.pool,
            "subblock": key,
            "why": why,
            "nodes": members,
        },
        recheck_since=ledger.clock.now() - lifecycle.guard.policy.window,
    )
    if request["state"] == "done":
        return f"reported to the provider earlier (request #{request['id']}: {request['outcome']})"
    if request["state"] != "pending":
        return (
            f"not reported to the provider: request #{request['id']} was {request['state']} "
            f"by {request['answered_by']} at {request['answered_at']:%Y-%m-%d %H:%M} UTC"
        )
    return (
        f"not reported to the provider: it disrupts every VM on the rack, so it waits for a "
        f"person's approval (request #{request['id']})"
    )


def apply_scopes(
    lifecycle: NodeLifecycle,
    state: FabricState,
    scope: ScopeOutcome,
    verdict: PoolFabricVerdict,
    cloud: CloudBackend | None = None,
) -> PoolFabricVerdict:
    """Act on pass 1's scopes after the nodes' verdict: quarantine each bad sub-block's nodes
    as a unit (and report it through ``cloud``, a ``CloudBackend``, when given), release or keep
    out the sub-block units retested tonight, and fail (and page) the pool for a slow block.
    Returns the pool's verdict with these reasons."""
    reasons, passed, page = list(verdict.reasons), verdict.passed, verdict.page
    pool_state = verdict.state
    bad = scope.verdict.bad_subblocks
    key: str | None  # a bad sub-block's, then each unit's (None: its node has no place)
    for key, why in sorted(bad.items()):
        nodes = sorted(n for n, k in scope.out.items() if k == key and n not in state.units)
        for node in nodes:
            evidence: dict[str, Any] = {SUBBLOCK_EVIDENCE: key, "reason": why}
            lifecycle.quarantine(node, subblock_reason(key, why), evidence, run_id=state.run_id)
        if nodes:
            reasons.append(f"{subblock_reason(key, why)}: {', '.join(nodes)}")
        if cloud is not None:
            members = sorted(n for n, k in scope.out.items() if k == key)
            told = request_report(lifecycle, cloud, state, key, why, members)
            reasons.append(f"sub-block {key} {told}")
    for node in state.units:
        key = state.places.get(node)
        mine = [
            bool(r["passed"]) or i in scope.explained
            for i, r in enumerate(state.pass1)
            if node in (r["node_a"], r["node_b"])
        ]
        evidence = {SUBBLOCK_EVIDENCE: key}
        if key in bad or not mine or not all(mine):
            why = (bad.get(key) if key is not None else None) or "its pairs did not pass"
            lifecycle.move(
                node,
                NodeMove(
                    NodeState.RETESTING,
                    f"sub-block {key} retested with its rack: {why}; kept out, retested next night",
                    evidence=evidence,
                    run_id=state.run_id,
                    stay=True,
                ),
            )
            reasons.append(f"{node} kept out with sub-block {key}: {why}")
        else:
            lifecycle.release(
                node,
                f"sub-block {key} crossed fine again: released with its rack",
                evidence,
                run_id=state.run_id,
            )
            reasons.append(f"{node} released with sub-block {key}")
    for _, why in sorted(scope.verdict.slow_blocks.items()):
        reasons.append(f"{why}: a job across blocks would run slow (paging)")
        passed, page, pool_state = False, True, "degraded"
    return replace(verdict, passed=passed, page=page, state=pool_state, reasons=reasons)
