"""passive_checks (issue 20): busy nodes' GPU health read passively from their dcgm-exporter,
one NodeHealth per node at level 0 with the action of the nightly's rules; a node without an
exporter is left out; an exporter that cannot be read, or serves no metrics of its own, leaves
its node not checked (nothing done on its account)."""

from __future__ import annotations

import pytest

from gpufleet.backends import cluster_backend
from gpufleet.backends.sim.gpu_health import faulty_gpu
from gpufleet.backends.sim.state import SimState
from gpufleet.config.catalog import load_catalog
from gpufleet.domain.health import PASSIVE, HealthAction
from gpufleet.errors import BackendError, TransientBackendError
from gpufleet.services.validation.health import NodeHealth
from gpufleet.services.validation.passive import PASSIVE_LEVEL, passive_checks, read_exporter
from tests.support.fleet import frozen_sim_clock

A = HealthAction
CLUSTER, POOL = "a3u-sim", "h200-a"
NODES = [f"{CLUSTER}-{POOL}-{i}" for i in range(4)]
CLEAN = 'DCGM_FI_DEV_XID_ERRORS{gpu="0",UUID="GPU-aaaa-0001"} 0\n'


@pytest.fixture
def sim(fleet_state):
    frozen_sim_clock()
    catalog = load_catalog()
    return catalog.pool(CLUSTER, POOL), cluster_backend(catalog.cluster(CLUSTER))


class Exporters:
    """A cluster backend whose nodes' exporters serve what a test says (an exception: raise)."""

    def __init__(self, served: dict[str, object]) -> None:
        self.served = served
        self.asked: list[str] = []

    def gpu_metrics(self, node: str) -> str | None:
        self.asked.append(node)
        got = self.served.get(node)
        if isinstance(got, Exception):
            raise got
        return got  # type: ignore[return-value]


def test_busy_nodes_on_the_sim_get_the_action_nvidia_recommends(sim):
    ref, backend = sim
    SimState().inject(CLUSTER, POOL, f"xid:{NODES[1]}:79")
    SimState().inject(CLUSTER, POOL, f"nvlink-down:{NODES[2]}")
    checks = passive_checks(backend, ref, NODES)
    assert {n: c.action for n, c in checks.items()} == {
        NODES[0]: A.HEALTHY.value,
        NODES[1]: A.REBOOT.value,
        NODES[2]: A.REPAIR.value,
        NODES[3]: A.HEALTHY.value,
    }
    rebooted = checks[NODES[1]]
    assert isinstance(rebooted, NodeHealth) and rebooted.failed
    assert (rebooted.level, rebooted.gpu_seconds) == (PASSIVE_LEVEL, 0.0) == (0, 0.0)
    assert rebooted.reason.startswith(f"{PASSIVE}: GPU {faulty_gpu(NODES[1], 8)} (PCI ")
    assert "Xid 79" in rebooted.reason
    assert not checks[NODES[0]].failed and checks[NODES[0]].reason.startswith(PASSIVE)
    assert NodeHealth.from_dict(rebooted.to_dict()) == rebooted  # travels in a task's state


def test_a_cluster_without_an_exporter_gives_no_result(sim):
    ref, _ = sim
    cluster = load_catalog().cluster(CLUSTER)
    bare = cluster.model_copy(
        update={"sim": cluster.sim.model_copy(update={"dcgm_exporter": False})}
    )
    assert passive_checks(cluster_backend(bare), ref, NODES) == {}


def test_nodes_without_an_exporter_are_left_out_and_the_rest_kept(sim):
    ref, _ = sim
    backend = Exporters({"a": CLEAN, "b": None})
    assert list(passive_checks(backend, ref, ["a", "b", "c"])) == ["a"]
    assert backend.asked == ["a", "b", "c"]


@pytest.mark.parametrize(
    ("served", "says"),
    [
        (TransientBackendError("503 Service Unavailable"), "could not be read (503 Service"),
        (BackendError("dcgm-exporter pod x/y on node a is Pending"), "is Pending"),
        ("<html>404 page not found</html>", "is not its metrics (no DCGM_ metric found"),
        ('DCGM_FI_DEV_GPU_TEMP{gpu="0"} 60\n', "serves none of Xid (DCGM_FI_DEV_XID_ERRORS)"),
    ],
)
def test_an_exporter_that_tells_nothing_leaves_its_node_not_checked(sim, served, says):
    ref, _ = sim
    checks = passive_checks(Exporters({"a": served, "b": CLEAN}), ref, ["a", "b"])
    assert checks["a"].action is None and not checks["a"].failed
    assert checks["a"].reason.startswith("not checked: ") and says in checks["a"].reason
    assert checks["a"].level == PASSIVE_LEVEL
    assert checks["b"].action == A.HEALTHY.value  # one node's exporter does not stop the rest


def test_what_the_parser_refused_is_a_note():
    text = CLEAN + 'DCGM_FI_DEV_ROW_REMAP_PENDING{gpu="0",UUID="GPU-aaaa-0001"} 2\n'
    health = read_exporter(text, "a")
    assert health.action == A.HEALTHY.value
    assert "not read: line 2: DCGM_FI_DEV_ROW_REMAP_PENDING: 2 is neither 0 nor 1" in health.notes
