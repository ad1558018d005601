"""The simulated fleet's drain calls: ``pods_on_node`` and an ``evict`` that honours
PodDisruptionBudgets as the Eviction API does and fails the evicted pod's JobSet as a real
JobSet with backoffLimit 0 / maxRestarts 0 fails.

Workloads are the real training JobSet we render (``render_training_job``), run on the sim.
"""

from __future__ import annotations

import pytest

from gpufleet.backends import cluster_backend
from gpufleet.backends.sim.programs import START_DELAY_S, TRAINING_RUN_S, speed
from gpufleet.backends.sim.state import SimState
from gpufleet.config.catalog import load_catalog
from gpufleet.domain.workloads import WORKLOAD_LABEL, workload_selector
from gpufleet.errors import BackendError
from gpufleet.manifests.training import TrainingJobSpec, render_training_job
from tests.support.fleet import frozen_sim_clock

NS = "ml"
WHERE = ("a3u-sim", "h200-a")


@pytest.fixture
def ref(fleet_state):
    frozen_sim_clock()
    return load_catalog().pool(*WHERE)


@pytest.fixture
def backend(ref):
    return cluster_backend(ref.cluster)


def start_training(backend, ref, name: str, nodes: int = 2) -> list:
    """Apply a training JobSet and wait until all its pods run; its pods."""
    spec = TrainingJobSpec(
        name=name,
        namespace=NS,
        image="example/train:1",
        command=["torchrun", "train.py"],
        nodes=nodes,
        gpus_per_node=ref.pool.gpu.count,
    )
    backend.apply(render_training_job(ref, spec))
    status = backend.workload_status("JobSet", name, NS)
    assert status.phase != "Running", status  # the pods start after START_DELAY_S
    SimState().clock.advance(START_DELAY_S * speed())
    status = backend.workload_status("JobSet", name, NS)
    assert status.phase == "Running", status
    return list(status.pods)


def pdb(name: str, selector: dict, **budget) -> dict:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"selector": selector, **budget},
    }


TRAINING = {"matchLabels": {WORKLOAD_LABEL: "training"}}


def test_pods_on_node_lists_unfinished_pods_with_namespace_and_labels(backend, ref):
    (pod,) = start_training(backend, ref, "solo", nodes=1)
    listed = backend.pods_on_node(pod.node)
    assert [(p.namespace, p.name, p.phase) for p in listed] == [(NS, pod.name, "Running")]
    assert listed[0].labels[WORKLOAD_LABEL] == "training"
    assert listed[0].owner_kind is None and not listed[0].daemonset
    assert backend.list_pods(NS, workload_selector("JobSet", "solo"))[0].namespace == NS
    other = next(n.name for n in backend.list_nodes(ref.pool.name) if n.name != pod.node)
    assert backend.pods_on_node(other) == []


def test_a_pod_whose_simulated_end_passed_is_not_on_the_node(backend, ref):
    (pod,) = start_training(backend, ref, "short", nodes=1)
    assert [p.name for p in backend.pods_on_node(pod.node)] == [pod.name]
    SimState().clock.advance(TRAINING_RUN_S * speed() - 1)
    assert not backend.workload_status("JobSet", "short", NS).done
    SimState().clock.advance(1)
    assert backend.workload_status("JobSet", "short", NS).done
    assert backend.list_pods(NS, workload_selector("JobSet", "short"))[0].finished
    assert backend.pods_on_node(pod.node) == []
    backend.apply(pdb("strict", TRAINING, minAvailable=5))
    assert backend.evict(pod.name, NS) is True  # a finished pod goes whatever budgets say
    assert backend.list_pods(NS, workload_selector("JobSet", "short")) == []
    assert backend.workload_status("JobSet", "short", NS).phase == "Succeeded"


def test_min_available_refuses_the_eviction_that_would_break_it(backend, ref):
    first = start_training(backend, ref, "first", nodes=1)[0]
    backend.apply(pdb("keep-one", TRAINING, minAvailable=1))

    assert backend.evict(first.name, NS) is False  # 1 running, 1 wanted: not now
    assert [p.name for p in backend.pods_on_node(first.node)] == [first.name]
    assert backend.workload_status("JobSet", "first", NS).phase == "Running"

    # another replica runs: one may go
    second = start_training(backend, ref, "second", nodes=1)[0]
    assert backend.evict(first.name, NS) is True
    assert backend.pods_on_node(first.node) == []
    # and now the last one is guarded again
    assert backend.evict(second.name, NS) is False
    assert backend.evict(first.name, NS) is True  # already gone: the goal is met


def test_relaxing_the_budget_lets_the_eviction_through(backend, ref):
    pods = start_training(backend, ref, "pair", nodes=2)
    backend.apply(pdb("whole-gang", TRAINING, minAvailable=2))
    assert backend.evict(pods[0].name, NS) is False
    assert backend.ensure_object(pdb("whole-gang", TRAINING, minAvailable=1)) == "updated"
    assert backend.evict(pods[0].name, NS) is True


def test_max_unavailable_and_budgets_that_select_other_pods(backend, ref):
    pods = start_training(backend, ref, "gang", nodes=2)
    backend.apply(pdb("elsewhere", {"matchLabels": {"app": "web"}}, minAvailable=5))
    backend.apply(pdb("none-down", TRAINING, maxUnavailable=0))
    assert backend.evict(pods[0].name, NS) is False  # 0 may be unavailable
    backend.delete("PodDisruptionBudget", "none-down", NS)
    backend.apply(pdb("one-down", TRAINING, maxUnavailable="50%"))
    assert backend.evict(pods[0].name, NS) is True  # 1 of 2 may be unavailable


def test_a_pod_two_budgets_select_cannot_be_evicted(backend, ref):
    (pod,) = start_training(backend, ref, "twice", nodes=1)
    backend.apply(pdb("a", TRAINING, minAvailable=0))
    backend.apply(pdb("b", {"matchLabels": {}}, minAvailable=0))  # {} selects every pod
    with pytest.raises(BackendError, match="more than one PodDisruptionBudget"):
        backend.evict(pod.name, NS)


def test_an_evicted_training_pod_fails_its_jobset(backend, ref):
    pods = start_training(backend, ref, "evicted", nodes=2)
    assert backend.evict(pods[0].name, NS) is True

    status = backend.workload_status("JobSet", "evicted", NS)
    assert status.phase == "Failed" and status.done
    assert f"pod {pods[0].name} was evicted" in status.message
    # the failed Job's other pod ended: neither node holds the job any more
    assert [p.phase for p in status.pods] == ["Failed"]
    for node in (pods[0].node, pods[1].node):
        assert backend.pods_on_node(node) == []
    busy = {n.name: n.workloads for n in backend.list_nodes(ref.pool.name)}
    assert busy[pods[0].node] == () and busy[pods[1].node] == ()
