"""The one drain (``services.nodes.drain``) for both of its callers: a transition's pool drain
(``Drain.step``: batches, soak, PDB retries, training jobs waited for, the timeout policy) and
the repair path's pass that never blocks (``Drain.once`` through ``NodeRemediation``: wait and
name the jobs in an alert, or evict). Over an in-memory cluster and a ``ManualClock``: each
test sets up the pods it needs, and nothing waits."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from gpufleet.backends.base import Ensured, NodeInfo, PodInfo
from gpufleet.config.catalog import load_catalog
from gpufleet.domain.nodes import NodeState
from gpufleet.domain.workloads import JOBSET_NAME_LABEL, WORKLOAD_LABEL
from gpufleet.services.nodes.drain import Drain, DrainSettings, DrainTimeout
from gpufleet.services.nodes.lifecycle import NodeLifecycle
from gpufleet.services.nodes.remediation import NodeRemediation, RemediationSettings
from gpufleet.store import Ledger
from gpufleet.store.nodes import NodeMove
from tests.support.clock import ManualClock

CLUSTER, POOL = "a3u-sim", "h200-a"


@dataclass
class Cluster:
    """Nodes and their pods; ``guarded`` pods a PodDisruptionBudget refuses to evict."""

    nodes: dict[str, bool] = field(default_factory=dict)  # name -> cordoned
    pods: dict[str, list[PodInfo]] = field(default_factory=dict)
    guarded: set[str] = field(default_factory=set)
    evictions: list[str] = field(default_factory=list)

    def add(self, node: str) -> None:
        self.nodes[node] = False
        self.pods.setdefault(node, [])

    def pod(self, node: str, name: str, *, job: str | None = None, daemonset: bool = False):
        labels = {WORKLOAD_LABEL: "training", JOBSET_NAME_LABEL: job} if job else {}
        owner = "DaemonSet" if daemonset else ("JobSet" if job else "ReplicaSet")
        self.pods[node].append(PodInfo(name, node, "Running", labels, None, "ml", owner))

    def list_nodes(self, pool: str) -> list[NodeInfo]:
        return [
            NodeInfo(n, POOL, {}, (), cordoned, True, provider_id=f"sim://{n}")
            for n, cordoned in sorted(self.nodes.items())
        ]

    def set_unschedulable(self, node: str, value: bool) -> None:
        self.nodes[node] = value

    def add_taint(self, node: str, taint) -> None: ...

    def remove_taint(self, node: str, key: str) -> None: ...

    def set_labels(self, node: str, labels: dict) -> None: ...

    def pods_on_node(self, node: str) -> list[PodInfo]:
        return list(self.pods.get(node, []))

    def evict(self, pod: str, namespace: str) -> bool:
        if pod in self.guarded:
            return False
        self.evictions.append(pod)
        for pods in self.pods.values():
            pods[:] = [p for p in pods if p.name != pod]
        return True


class Cloud:
    def __init__(self) -> None:
        self.repaired: list[str] = []

    def repair_node(self, node: NodeInfo, dry_run: bool = False) -> Ensured:
        self.repaired.append(node.name)
        return Ensured(kind="repair", name=node.name, action="created", status="RUNNING")


def pool_of(n: int) -> Cluster:
    cluster = Cluster()
    for i in range(n):
        cluster.add(f"n{i}")
    return cluster


# --- the pool drain (a transition) -----------------------------------------------------------


def test_batches_cordon_everything_and_soak_between_batches():
    cluster, clock = pool_of(4), ManualClock(1000.0)
    cluster.pod("n0", "web-0")
    drain = Drain(cluster, POOL, DrainSettings(batch_size=2, soak_s=60), clock=clock)
    first = drain.step()
    assert all(cluster.nodes.values())  # every node cordoned at the first step
    assert first.evicted == ["ml/web-0"] and first.state["batch"] == ["n0", "n1"]
    assert not first.done and first.next_check_s == 30.0  # n0 was busy: look again
    second = drain.step(first.state)
    assert second.state["drained"] == ["n0", "n1"] and second.next_check_s == 60
    clock.advance(59)
    assert drain.step(second.state).notes == [f"{POOL}: soaking 1 s before the next batch"]
    clock.advance(1)
    third = drain.step(second.state)
    assert third.done and third.state["drained"] == ["n0", "n1", "n2", "n3"]


def test_daemonset_pods_stay_and_do_not_hold_the_drain():
    cluster = pool_of(1)
    cluster.pod("n0", "nccl-installer", daemonset=True)
    progress = Drain(cluster, POOL, DrainSettings(), clock=ManualClock()).step()
    assert progress.done and cluster.evictions == []


def test_a_budget_refusal_is_retried_on_the_next_step():
    cluster = pool_of(1)
    cluster.pod("n0", "guarded")
    cluster.guarded.add("guarded")
    drain = Drain(cluster, POOL, DrainSettings(), clock=ManualClock())
    first = drain.step()
    assert not first.done and any("PodDisruptionBudget" in n for n in first.notes)
    cluster.guarded.clear()
    second = drain.step(first.state)
    assert second.evicted == ["ml/guarded"]
    assert drain.step(second.state).done


@pytest.mark.parametrize("policy", ["wait", "fail", "evict"])
def test_training_jobs_are_waited_for_then_the_timeout_policy_decides(policy):
    cluster, clock = pool_of(1), ManualClock(0.0)
    cluster.pod("n0", "train-0", job="long")
    settings = DrainSettings(timeout_s=3600, on_timeout=policy, realert_s=600)
    drain = Drain(cluster, POOL, settings, clock=clock)
    first = drain.step()
    assert first.waiting_jobs == ["ml/long"] and not first.alerts and cluster.evictions == []
    clock.advance(3600)
    if policy == "fail":
        with pytest.raises(DrainTimeout, match="ml/long"):
            drain.step(first.state)
        return
    second = drain.step(first.state)
    if policy == "evict":
        assert second.evicted == ["ml/train-0"] and not second.alerts
        return
    assert second.alerts and "ml/long" in second.alerts[0]  # wait: alert, keep waiting
    assert not drain.step(second.state).alerts  # not again before realert_s
    clock.advance(600)
    assert drain.step(second.state).alerts
    assert cluster.evictions == []


# --- the repair path's pass that never blocks ------------------------------------------------


@pytest.fixture
def repair(fleet_state):
    """A pool of 4 nodes with n1 to be drained for repair, and its remediation."""
    cluster, cloud = pool_of(4), Cloud()
    ref = load_catalog().pool(CLUSTER, POOL)
    ledger = Ledger()
    walk(ledger, "n1", "quarantined", "retesting", "draining")

    def remediation(policy: str = "wait") -> NodeRemediation:
        settings = RemediationSettings(drain=policy)
        return NodeRemediation(ref, ledger, settings, backend=cluster, cloud=cloud)

    return cluster, cloud, ledger, remediation


def walk(ledger: Ledger, node: str, *states: str) -> None:
    """Move ``node`` through ``states`` as the nightly does (a failed retest drains it)."""
    for to in states:
        ledger.move_node(CLUSTER, POOL, node, NodeMove(to, reason=f"to {to}", retest_passed=False))


def state(ledger: Ledger, node: str = "n1") -> str:
    return ledger.node_state(CLUSTER, node)["state"]


def test_repair_drain_waits_names_the_job_and_its_launch_run_and_looks_again(repair):
    cluster, cloud, ledger, remediation = repair
    ledger.ensure_launch(
        cluster=CLUSTER, namespace="ml", job="long", run_id="launch-7", pool=POOL, state="running"
    )
    cluster.pod("n1", "train-0", job="long")
    cluster.pod("n1", "nccl-installer", daemonset=True)
    result = remediation("wait").step("night-1")
    assert cluster.nodes["n1"] is True  # cordoned
    assert cluster.evictions == [] and state(ledger) == "draining"
    assert len(result.alerts) == 1
    assert "long (launch run launch-7)" in result.alerts[0] and "n1" in result.alerts[0]
    assert remediation("wait").step("night-2").alerts  # named again the next night
    cluster.pods["n1"] = [p for p in cluster.pods["n1"] if p.daemonset]  # the job finished
    third = remediation("wait").step("night-3")
    assert state(ledger) == "repairing" and third.repairs_started == ["n1"]
    assert cloud.repaired == ["n1"]  # drained and repaired in the same pass


def test_repair_drain_evicts_training_under_evict(repair):
    cluster, _, ledger, remediation = repair
    cluster.pod("n1", "train-0", job="long")
    result = remediation("evict").step("night-1")
    assert cluster.evictions == ["train-0"] and not result.alerts
    assert "n1: drained" in result.notes


def test_repair_drain_names_a_pod_a_budget_keeps(repair):
    cluster, _, ledger, remediation = repair
    cluster.pod("n1", "guarded")
    cluster.guarded.add("guarded")
    result = remediation("evict").step("night-1")
    assert "n1: eviction of guarded refused for now (PDB)" in result.notes
    assert result.alerts and "guarded" in result.alerts[0]
    assert state(ledger) == "draining"


def test_pods_back_on_a_drained_node_send_it_to_drain_again(repair):
    cluster, cloud, ledger, remediation = repair
    NodeLifecycle(load_catalog().pool(CLUSTER, POOL), ledger, cluster).move(
        "n1", NodeMove(NodeState.DRAINED, "drained")
    )
    cluster.pod("n1", "web-0")
    result = remediation().step("night-1")
    assert "n1: pods came back on it; draining again" in result.notes
    assert state(ledger) == "draining" and cloud.repaired == []


def test_the_repair_policy_is_one_of_the_never_blocking_ones():
    with pytest.raises(Exception, match="not one of wait, evict"):
        RemediationSettings(drain="fail")
