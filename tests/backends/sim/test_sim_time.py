"""One clock the tests control: the sim's clock lives in its state file (every task process sees
the same simulated time), moves only by ``advance`` once frozen, never goes back, and is what
the sim's pods, creates, fault leases and a drain's soak and timeout run on."""

from __future__ import annotations

import subprocess
import sys
import time
from datetime import UTC, datetime

import pytest

from gpufleet.backends import cluster_backend
from gpufleet.backends.sim.programs import START_DELAY_S, speed
from gpufleet.backends.sim.state import SimState
from gpufleet.config.catalog import load_catalog
from gpufleet.domain.clock import SYSTEM_CLOCK, Clock
from gpufleet.domain.faults import RunLease
from gpufleet.manifests.training import TrainingJobSpec, render_training_job
from gpufleet.services.nodes.drain import Drain, DrainSettings, backend_clock
from tests.support.clock import ManualClock
from tests.support.fleet import frozen_sim_clock

CLUSTER, POOL = "a3u-sim", "h200-a"


def test_the_clocks_keep_the_protocol():
    for clock in (SYSTEM_CLOCK, ManualClock(), SimState().clock):
        assert isinstance(clock, Clock)
    manual = ManualClock(1000.0)
    manual.advance(5)
    assert manual.time() == manual.monotonic() == 1005.0
    assert manual.now() == datetime.fromtimestamp(1005.0, UTC)
    with pytest.raises(ValueError, match="does not go back"):
        manual.advance(-1)


def test_a_frozen_sim_clock_moves_only_when_advanced_and_never_back(fleet_state):
    clock = frozen_sim_clock()
    at = clock.time()
    assert abs(at - time.time()) < 60  # frozen where the wall clock was
    assert clock.time() == at and clock.freeze() == at  # freezing again changes nothing
    assert clock.advance(90) == at + 90 == SimState().clock.time()  # another reader sees it
    assert clock.now() == datetime.fromtimestamp(at + 90, UTC)
    with pytest.raises(ValueError, match="does not go back"):
        clock.advance(-1)
    SimState().reset()  # the fleet is forgotten, its time is not
    assert SimState().clock.time() == at + 90


def test_a_thawed_sim_clock_runs_on_from_where_it_stood(fleet_state):
    clock = frozen_sim_clock()
    at = clock.advance(3600)  # an hour ahead of the wall clock
    thawed = clock.thaw()
    assert abs(thawed - at) < 1  # no jump back to the wall clock
    later = SimState().clock.time()  # another reader: running again, still an hour ahead
    assert later >= thawed and abs(later - (time.time() + 3600)) < 5
    assert abs(clock.thaw() - later) < 1  # thawing a running clock changes nothing
    clock.freeze()  # the rest of the test's fleet keeps a frozen clock


def test_sleeping_on_a_frozen_clock_advances_it_and_a_retry_waits_on_the_sims_clock(fleet_state):
    from gpufleet.backends import cloud_backend
    from gpufleet.errors import TransientBackendError

    clock = frozen_sim_clock()
    at = clock.time()
    began = time.monotonic()
    clock.sleep(3600)  # an hour of sim time, no wall time
    assert clock.time() == at + 3600 and time.monotonic() - began < 5
    manual = ManualClock(10.0)
    manual.sleep(2.5)
    assert manual.time() == 12.5

    # a cloud that answers "busy" to every call: the retrying backend's four backoffs (0.2,
    # 0.4, 0.8, 1.6 s) pass on the sim's clock, then the last error is raised
    cluster = load_catalog().cluster(CLUSTER)
    SimState().inject(CLUSTER, POOL, "api-errors:1")
    before, began = clock.time(), time.monotonic()
    with pytest.raises(TransientBackendError, match="503"):
        cloud_backend(cluster).get_reservation("any")
    assert clock.time() - before == pytest.approx(3.0)
    assert time.monotonic() - began < 2.5  # not slept on the wall clock


def test_an_advance_is_seen_by_another_process(fleet_state):
    SimState().clock.advance(3600)  # not frozen: the wall clock plus an hour
    code = "from gpufleet.backends.sim.state import SimState; print(SimState().clock.time())"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert float(out) - time.time() == pytest.approx(3600, abs=60)


def test_pods_and_fault_leases_follow_the_sim_clock(fleet_state):
    clock = frozen_sim_clock()
    ref = load_catalog().pool(CLUSTER, POOL)
    backend = cluster_backend(ref.cluster)
    spec = TrainingJobSpec(
        name="t", namespace="ml", image="x/y:1", command=["torchrun"], nodes=1, gpus_per_node=8
    )
    backend.apply(render_training_job(ref, spec))
    assert backend.workload_status("JobSet", "t", "ml").phase != "Running"
    clock.advance(START_DELAY_S * speed())
    assert backend.workload_status("JobSet", "t", "ml").phase == "Running"
    SimState().inject(CLUSTER, POOL, "fabric-down", lease=RunLease("d", "r", seconds=60))
    clock.advance(59)
    assert [f.fault.text for f in SimState().faults(cluster=CLUSTER)] == ["fabric-down"]
    clock.advance(1)
    assert SimState().faults(cluster=CLUSTER) == []  # its lease ran out on the sim's clock


def test_a_drain_soaks_and_times_out_on_the_sim_clock(fleet_state):
    clock = frozen_sim_clock()
    backend = cluster_backend(load_catalog().cluster(CLUSTER))
    assert backend_clock(backend) is not SYSTEM_CLOCK  # found through the retrying wrapper
    assert backend_clock(backend).time() == clock.time()
    drain = Drain(backend, POOL, DrainSettings(batch_size=3, soak_s=300))
    first = drain.step()
    assert first.next_check_s == 300 and not first.done  # one batch drained: soak
    clock.advance(299)
    assert drain.step(first.state).notes == [f"{POOL}: soaking 1 s before the next batch"]
    clock.advance(1)
    second = drain.step(first.state)
    assert any("draining batch" in note for note in second.notes)


def test_a_drain_times_out_on_the_sim_clock(fleet_state):
    from gpufleet.backends.sim.programs import RUN_SECONDS_ANNOTATION
    from gpufleet.domain.workloads import workload_pod_templates
    from gpufleet.services.nodes.drain import DrainTimeout

    clock = frozen_sim_clock()
    ref = load_catalog().pool(CLUSTER, POOL)
    backend = cluster_backend(ref.cluster)
    spec = TrainingJobSpec(
        name="long", namespace="ml", image="x/y:1", command=["torchrun"], nodes=6, gpus_per_node=8
    )
    job = render_training_job(ref, spec)
    for _, _, template in workload_pod_templates(job):
        template["metadata"].setdefault("annotations", {})[RUN_SECONDS_ANNOTATION] = "1e6"
    backend.apply(job)
    clock.advance(START_DELAY_S * speed())
    drain = Drain(backend, POOL, DrainSettings(timeout_s=3600, on_timeout="fail"))
    state = drain.step().state
    clock.advance(3599)
    assert drain.step(state).waiting_jobs == ["ml/long"]
    clock.advance(1)
    with pytest.raises(DrainTimeout, match="ml/long"):
        drain.step(state)


def test_a_drain_takes_the_clock_it_is_given(fleet_state):
    manual = ManualClock(5000.0)
    backend = cluster_backend(load_catalog().cluster(CLUSTER))
    drain = Drain(backend, POOL, DrainSettings(batch_size=3, soak_s=300), clock=manual)
    first = drain.step()
    assert first.state["started_at"] == 5000.0
    manual.advance(300)
    assert any("draining batch" in note for note in drain.step(first.state).notes)


def test_a_pair_whose_node_went_away_fails_at_its_jobs_deadline(fleet_state):
    from gpufleet.manifests.nccl_validation import NCCL_DEADLINE_SECONDS, render_nccl_validation

    clock = frozen_sim_clock()
    ref = load_catalog().pool(CLUSTER, POOL)
    kube = cluster_backend(ref.cluster)
    a, b = sorted(n.name for n in kube.list_nodes(POOL))[:2]
    manifest = render_nccl_validation(ref, [(a, f"{b}-gone")], "run-deadline")  # no such node
    kube.apply(manifest)
    name, ns = manifest["metadata"]["name"], manifest["metadata"]["namespace"]
    clock.advance(NCCL_DEADLINE_SECONDS - 1)
    pending = kube.workload_status("JobSet", name, ns)
    assert pending.phase == "Pending" and not pending.done
    clock.advance(1)  # the Job controller's activeDeadlineSeconds, placed or not
    failed = kube.workload_status("JobSet", name, ns)
    assert failed.phase == "Failed" and failed.done
    assert "DeadlineExceeded" in (failed.message or "")
