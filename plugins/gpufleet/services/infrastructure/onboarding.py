"""Region onboarding: from the catalog's reservations to a validated, schedulable region.

One ``RegionOnboarding`` per run and region; each step is a method the DAG's operators call
(``domain.onboarding.STEPS`` is their order): preflight (refuse shortfalls, of machines and of
the healthy hosts the provider reports, and RDMA mismatches before anything is created),
network, cluster, filesystems, node pools (tainted ``gpufleet.io/validation-pending``), nodes Ready,
cluster add-ons, then — after the nightly validation's own operators ran on the new nodes —
release (mark the region ready, or say which nodes stay tainted and why).

Every cloud call is an "ensure" of the cloud backend: a rerun finds what the first run created.
Each step returns a ``StepResult`` (what was found, created, would be created with
``dry_run``, or refused; resources still being created to wait on) and records its actions in
the ledger, where the run's report reads them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from gpufleet.backends import cloud_backend, cluster_backend
from gpufleet.backends.base import CloudBackend, ClusterBackend, ResourceStatus, Taint
from gpufleet.domain.fleet import Catalog, Cluster, Region
from gpufleet.domain.kueue import pool_topology
from gpufleet.domain.leases import Liveness
from gpufleet.domain.onboarding import host_counts, preflight_refusals, view_note
from gpufleet.domain.workloads import UNVALIDATED_KEY
from gpufleet.errors import GpufleetError
from gpufleet.services.common.step_report import StepReport
from gpufleet.services.infrastructure import region_lock
from gpufleet.store import Ledger

log = logging.getLogger(__name__)

UNVALIDATED_TAINT = Taint(UNVALIDATED_KEY, "true", "NoSchedule")


class OnboardingRefused(GpufleetError):
    """Onboarding stopped before creating anything (preflight), or a step cannot go on."""


@dataclass
class StepResult(StepReport):
    """What one onboarding step did (a ``StepReport``; ``notes``: sentences for the log and the
    report), besides: its ``actions``; ``waiting``: ``[cluster, kind, name]`` of resources still
    being created (the operator defers on them: not ``done``); ``provider_views`` (preflight):
    ``cluster/pool`` -> the provider's view of its reservation's sub-blocks
    (``ReservationHealth.to_dict()``; ``{"error": ...}``: not read). Its dict is the task's
    XCom and the deferral's carry: the onboarding's own keys only."""

    actions: list[dict[str, Any]] = field(default_factory=list)
    waiting: list[list[str]] = field(default_factory=list)
    provider_views: dict[str, dict[str, Any]] = field(default_factory=dict)

    def wait_on(self, resource: list[str]) -> None:
        """Wait on ``resource`` (``[cluster, kind, name]``): the step is not done."""
        self.waiting.append(resource)
        self.done = False

    def to_dict(self) -> dict[str, Any]:
        views = {"provider_views": self.provider_views} if self.provider_views else {}
        return {
            "step": self.step,
            "actions": self.actions,
            "notes": self.notes,
            "waiting": self.waiting,
            **views,
        }

    def summary(self) -> str:
        counts: dict[str, int] = {}
        for a in self.actions:
            counts[a["action"]] = counts.get(a["action"], 0) + 1
        return ", ".join(f"{n} {what}" for what, n in sorted(counts.items())) or "nothing to do"


def resource_status(
    cloud: CloudBackend, backend_for: Callable[[], ClusterBackend], kind: str, name: str
) -> tuple[str, str | None]:
    """The normalised status of one resource a step waits on, and a note. ``kind`` ``nodes``
    means "every node of pool ``name`` is Ready"."""
    if kind == "cluster":
        return cloud.get_cluster().status, None
    if kind == "node_pool":
        return cloud.get_node_pool(name).status, None
    if kind == "filesystem":
        return cloud.get_filesystem(name).status, None
    if kind == "nodes":
        nodes = backend_for().list_nodes(name)
        waiting = sorted(n.name for n in nodes if not n.ready)
        if nodes and not waiting:
            return ResourceStatus.READY, None
        return "CREATING", f"not Ready yet: {', '.join(waiting) or 'no nodes registered'}"
    raise ValueError(f"unknown resource kind {kind!r}")


class RegionOnboarding:
    """The steps of onboarding one catalog region, for one run."""

    def __init__(
        self,
        region: Region,
        ledger: Ledger,
        run_id: str,
        *,
        dry_run: bool = False,
        cloud_for: Callable[[Cluster], CloudBackend] = cloud_backend,
        cluster_for: Callable[[Cluster], ClusterBackend] = cluster_backend,
    ):
        self.region = region
        self.ledger = ledger
        self.run_id = run_id
        self.dry_run = dry_run
        self._cloud_for = cloud_for
        self._cluster_for = cluster_for
        self._clouds: dict[str, CloudBackend] = {}
        self._clusters: dict[str, ClusterBackend] = {}

    def cloud(self, cluster: Cluster) -> CloudBackend:
        if cluster.name not in self._clouds:
            self._clouds[cluster.name] = self._cloud_for(cluster)
        return self._clouds[cluster.name]

    def kube(self, cluster: Cluster) -> ClusterBackend:
        if cluster.name not in self._clusters:
            self._clusters[cluster.name] = self._cluster_for(cluster)
        return self._clusters[cluster.name]

    def _record(self, result: StepResult, ensured: Any) -> None:
        action = ensured if isinstance(ensured, dict) else ensured.to_dict()
        result.actions.append(action)
        self.ledger.record_onboarding_action(self.region.name, self.run_id, result.step, action)
        for diff in action.get("differences") or ():
            result.notes.append(f"{action['kind']} {action['name']} differs: {diff}")

    def _wait_on(self, result: StepResult, cluster: Cluster, ensured: Any) -> None:
        if not self.dry_run and ensured.status not in (ResourceStatus.READY, ResourceStatus.ABSENT):
            result.wait_on([cluster.name, ensured.kind, ensured.name])

    # --- the region's lock ------------------------------------------------------------------

    def lock(
        self, dag_id: str, holder_alive: Liveness, now: datetime | None = None, **lease: Any
    ) -> None:
        """Hold the region's onboarding lock for this run (every step that changes the region
        calls it first; ``services.infrastructure.region_lock``): take it when free, renew its
        lease, or take
        it over by compare-and-set from a dead holder (``holder_alive(dag_id, run_id)``: True,
        False, or None for a run this Airflow does not know: then its lease decides); refuse,
        naming the holder's run, while it lives or when another run took it over first."""
        refusal = region_lock.hold(
            self.ledger, self.region.name, dag_id, self.run_id, holder_alive, now, **lease
        )
        if refusal is not None:
            raise OnboardingRefused(refusal)

    def unlock(self) -> bool:
        """Release the region's lock if this run holds it: True if it did."""
        return self.ledger.release_region_lock(self.region.name, self.run_id)

    # --- steps ----------------------------------------------------------------------------

    def run_step(self, step: str) -> StepResult:
        """Do step ``step``: one of those an onboarding step task runs (``release`` is called
        with the run's ``validate``)."""
        actions: dict[str, Callable[[], StepResult]] = {
            "preflight": self.preflight,
            "network": self.network,
            "cluster": self.cluster,
            "filesystems": self.filesystems,
            "node_pools": self.node_pools,
            "nodes_ready": self.nodes_ready,
            "addons": self.addons,
        }
        if step not in actions:
            raise OnboardingRefused(
                f"no onboarding step {step!r}: the steps are {', '.join(actions)}"
            )
        return actions[step]()

    def preflight(self) -> StepResult:
        """Read every reservation and pool, and the provider's health of the sub-blocks of the
        reservation of each pool whose machines carry topology (``_provider_view``); refuse
        (``OnboardingRefused``, with the figures and both values) before anything is created."""
        result = StepResult("preflight")
        reports: dict[str, Any] = {}
        existing: set[str] = set()
        views: dict[str, Any] = {}
        read: dict[tuple[str, str, str | None], Any] = {}  # one read per reservation and block
        for cluster in self.region.clusters:
            cloud = self.cloud(cluster)
            for pool in cluster.active_pools:
                name, key = pool.reservation.name, f"{cluster.name}/{pool.name}"
                if name not in reports:
                    reports[name] = cloud.get_reservation(name)
                    r = reports[name]
                    result.notes.append(
                        f"reservation {name}: {r.machine_type} x {r.count} in {r.zone or '?'}, "
                        f"{r.in_use} in use, {r.free} free"
                        + (f", blocks {', '.join(r.blocks)}" if r.blocks else "")
                    )
                if cloud.get_node_pool(pool.name).status != ResourceStatus.ABSENT:
                    existing.add(key)
                scope = (cluster.name, name, pool.reservation.block)
                if pool_topology(cluster, pool) is not None:
                    if scope not in read:
                        read[scope] = self._provider_view(result, cloud, key, pool)
                    view, result.provider_views[key] = read[scope]
                    if view is not None:
                        views[key] = view
        refusals = preflight_refusals(self.region, reports, existing, views)
        if existing:
            result.notes.append(f"node pools that exist already: {', '.join(sorted(existing))}")
        for refusal in refusals:
            seen = [k for k, v in views.items() if v.reservation == refusal.where]
            detail: dict[str, Any] = {"reason": refusal.reason}
            if seen:  # the provider's view of the refused reservation, beside the reason
                detail["provider_views"] = {k: result.provider_views[k] for k in seen}
            self._record(
                result,
                {"kind": "preflight", "name": refusal.where, "action": "refused", "detail": detail},
            )
        if refusals:
            if not self.dry_run:
                self._set_state("failed", "preflight refused: " + str(refusals[0]))
            raise OnboardingRefused(
                f"region {self.region.name}: preflight refused, nothing was created: "
                + "; ".join(str(r) for r in refusals)
            )
        if not self.dry_run and self._state() != "ready":
            self._set_state("onboarding", "onboarding started")
        return result

    def _provider_view(
        self, result: StepResult, cloud: CloudBackend, key: str, pool: Any
    ) -> tuple[Any, dict[str, Any]]:
        """The provider's view of ``pool``'s reservation (``reservation_health``) with a note in
        ``result``, and what the result records of it. The view is None when it is not to be
        judged: no sub-blocks reported (EKS) or not read (an error, or figures that are no host
        counts), which never refuses."""
        try:
            view = cloud.reservation_health(pool.name)
            for h in view.subblocks or ():
                host_counts(h)
        except (GpufleetError, ValueError) as exc:
            result.notes.append(
                f"{key}: the provider's sub-block health of reservation {pool.reservation.name} "
                f"was not read ({exc}): not judged, onboarding goes on"
            )
            return None, {"error": str(exc)}
        result.notes.append(f"{key}: {view_note(view, pool.nodes)}")
        return (view if view.subblocks else None), view.to_dict()

    def network(self) -> StepResult:
        result = StepResult("network")
        for cluster in self.region.clusters:
            for ensured in self.cloud(cluster).ensure_network(self.dry_run):
                self._record(result, ensured)
        return result

    def cluster(self) -> StepResult:
        result = StepResult("cluster")
        for cluster in self.region.clusters:
            ensured = self.cloud(cluster).ensure_cluster(self.dry_run)
            self._record(result, ensured)
            self._wait_on(result, cluster, ensured)
        return result

    def filesystems(self) -> StepResult:
        result = StepResult("filesystems")
        for cluster in self.region.clusters:
            for fs in cluster.filesystems:
                ensured = self.cloud(cluster).ensure_filesystem(fs.name, self.dry_run)
                self._record(result, ensured)
                self._wait_on(result, cluster, ensured)
        return result

    def node_pools(self) -> StepResult:
        """Each pool on its reservation; new pools come up tainted ``unvalidated``."""
        result = StepResult("node_pools")
        for cluster in self.region.clusters:
            for pool in cluster.active_pools:
                ensured = self.cloud(cluster).ensure_node_pool(
                    pool.name, self.dry_run, (UNVALIDATED_TAINT,)
                )
                self._record(result, ensured)
                self._wait_on(result, cluster, ensured)
        return result

    def nodes_ready(self) -> StepResult:
        """Which nodes registered and are Ready; ``waiting`` names pools with nodes not Ready."""
        result = StepResult("nodes_ready")
        if self.dry_run:
            result.notes.append("dry run: nodes are not checked")
            return result
        for cluster in self.region.clusters:
            for pool in cluster.active_pools:
                nodes = self.kube(cluster).list_nodes(pool.name)
                not_ready = sorted(n.name for n in nodes if not n.ready)
                result.notes.append(
                    f"{cluster.name}/{pool.name}: {len(nodes) - len(not_ready)} of "
                    f"{pool.nodes} nodes Ready"
                    + (f"; not Ready: {', '.join(not_ready)}" if not_ready else "")
                )
                if not_ready or len(nodes) < pool.nodes:
                    result.wait_on([cluster.name, "nodes", pool.name])
        return result

    def addons(self, controllers_source: str | None = None) -> StepResult:
        """Render and converge every cluster add-on (read-compare-patch: a rerun writes
        nothing)."""
        from gpufleet.services.infrastructure.addons import apply_cluster_addons

        result = StepResult("addons")
        for cluster in self.region.clusters:
            if self.dry_run:
                result.notes.append(f"{cluster.name}: dry run: add-ons are not applied")
                continue
            for action, note in apply_cluster_addons(
                cluster, self.cloud(cluster), self.kube(cluster), controllers_source
            ):
                if action is not None:
                    self._record(result, action)
                if note:
                    result.notes.append(note)
        return result

    def release(self, validate: bool) -> tuple[bool, StepResult]:
        """Mark the region ready when every node of every pool passed validation (lost the
        ``unvalidated`` taint); otherwise name each node that stays tainted and why.
        Returns (ready, result); ``ready`` is whether this run made it ready."""
        from gpufleet.domain.verdicts import latest_per_check

        result = StepResult("release")
        tainted: list[str] = []
        for cluster in self.region.clusters:
            for pool in cluster.active_pools:
                for node in self.kube(cluster).list_nodes(pool.name):
                    if node.unvalidated:
                        why = (
                            "not Ready"
                            if not node.ready
                            else ("quarantined" if node.quarantined else "not passed validation")
                        )
                        tainted.append(f"{node.name} ({why})")
        failed = [
            f"{v['cluster']}/{v['pool']} {v['kind']}: {v.get('verdict') or 'fail'}"
            for v in latest_per_check(self.ledger.validations_for_run(self.run_id))
            if v.get("verdict") != "pass" and v["cluster"] in {c.name for c in self.region.clusters}
        ]
        if validate and failed:
            reason = f"validation did not pass: {', '.join(failed)}"
            result.notes.append(reason)
            self._set_state("failed", reason)
            return False, result
        if not validate:
            result.notes.append(
                "validate=false: new nodes keep the gpufleet.io/validation-pending taint and the "
                f"region is NOT ready ({len(tainted)} node(s) tainted); run again with "
                "validate=true to validate and release them"
            )
            return False, result
        if tainted:
            reason = f"{len(tainted)} node(s) stay tainted: {', '.join(tainted)}"
            result.notes.append(reason)
            self._set_state("failed", reason)
            return False, result
        was = self._state()
        self._set_state("ready", "every pool validated")
        result.notes.append(
            f"region {self.region.name} is ready" + (" (it was already)" if was == "ready" else "")
        )
        return was != "ready", result

    # --- ledger --------------------------------------------------------------------------

    def _state(self) -> str | None:
        row = self.ledger.region_state(self.region.name)
        return row["state"] if row else None

    def _set_state(self, state: str, reason: str) -> None:
        self.ledger.set_region_state(self.region.name, state, reason, self.run_id)


def error_statuses(statuses: dict[str, str]) -> list[str]:
    """The resources (``cluster/kind/name``) whose status is ERROR."""
    return sorted(k for k, v in statuses.items() if v == ResourceStatus.ERROR)


def clusters_not_created(catalog: Catalog, ledger: Ledger, clusters: set[str]) -> dict[str, str]:
    """Of ``clusters``, those the cloud reports absent in regions the ledger does not record as
    ready: not onboarded yet, so the nightly leaves them out (saying so) instead of failing on
    them. A region recorded ready whose cluster is gone is not excused: validation fails
    loudly there. A cloud that cannot be asked keeps its clusters in scope."""
    states = ledger.region_states()
    out: dict[str, str] = {}
    for name in sorted(clusters):
        region, cluster = catalog.clusters[name]
        if (states.get(region.name) or {}).get("state") == "ready":
            continue
        try:
            status = cloud_backend(cluster).get_cluster().status
        except Exception as exc:  # noqa: BLE001 - no cloud credentials here: validate as before
            log.warning("%s: cannot ask the cloud whether it exists (%s)", name, exc)
            continue
        if status == ResourceStatus.ABSENT:
            out[name] = (
                f"cluster {name} does not exist yet: onboard region {region.name} first "
                "(the region_onboarding DAG)"
            )
    return out
