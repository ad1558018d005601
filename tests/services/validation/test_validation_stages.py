"""Where a validation's GPU time goes (issue 35): every validation pod's stages, from what the
cluster reports of it (the sim's modelled clock here), kept per pair and node in the ledger's
rows, adding up to what the row costs; the image pull cold on a node's first night, 0 once the
image is on the node or pre-pulled by the onboarding DaemonSet."""

from __future__ import annotations

import pytest

from gpufleet.backends import cluster_backend
from gpufleet.backends.sim.run_times import (
    COLD_PULL_S,
    CONTAINER_START_S,
    MPIRUN_START_S,
    RENDEZVOUS_S,
    SCHEDULE_S,
    SIDECAR_STOP_S,
)
from gpufleet.config.catalog import load_catalog
from gpufleet.manifests.addons.prepull import render_image_prepull
from gpufleet.store import Ledger
from tests.support.fleet import validate

# the health check itself: every idle node checked each night (the rotation: its own tests)
pytestmark = pytest.mark.usefixtures("level1_every_night")

CLUSTER, POOL = "a3u-sim", "h200-a"
GPUS = 8
# a pair pod pulls nccl-tests, the DCGM image of its GPU health step and the log sidecar
NCCL_PULL = COLD_PULL_S["nccl"] + COLD_PULL_S["dcgm"] + COLD_PULL_S["small"]


def rows(run_id: str) -> dict[str, dict]:
    out = {}
    for kind in ("fabric", "storage", "health"):
        row = Ledger().latest_validation(CLUSTER, POOL, kind)
        assert row is not None and row["run_id"] == run_id
        out[kind] = row
    return out


def test_every_pod_s_stages_are_kept_and_add_up_to_its_cost(fleet_state):
    validate(CLUSTER, POOL, run_id="night-1")
    got = rows("night-1")
    fabric = got["fabric"]["details"]
    pairs = fabric["stages"]["pairs"]
    assert len(pairs) == 3 and all(p["round"] == 0 for p in pairs)
    for pair in pairs:
        stages = pair["stages"]
        assert stages["scheduled"] == SCHEDULE_S
        assert stages["image_pull"] == pytest.approx(NCCL_PULL)  # the first night: cold
        assert stages["container_start"] == pytest.approx(CONTAINER_START_S)
        assert stages["gang"] == pytest.approx(RENDEZVOUS_S, abs=0.01)  # the launcher's line
        assert 1.0 <= stages["nccl_init"] <= 2.3  # the slowest rank's Init timings total
        assert stages["sweep"] > MPIRUN_START_S
        assert stages["teardown"] == pytest.approx(SIDECAR_STOP_S)
    for kind in ("fabric", "storage", "health"):  # GPU time per stage adds up to the cost
        details = got[kind]["details"]
        minutes = details["stages"]["gpu_minutes"]
        assert "scheduled" not in minutes  # waiting for a node holds no GPU
        assert sum(minutes.values()) == pytest.approx(details["gpu_minutes"], abs=0.01)
    storage = got["storage"]["details"]["stages"]
    assert storage["nodes"] and all(s["io"] > 0 for s in storage["nodes"].values())
    health = got["health"]["details"]["nodes"]  # each check: its step in its pair's pod
    assert all(list(c["stages"]) == [f"diag_r{c['level']}"] for c in health.values())


def test_a_node_pulls_an_image_once_and_a_pre_pulled_one_never(fleet_state):
    validate(CLUSTER, POOL, run_id="night-1")
    cold = rows("night-1")["fabric"]["details"]
    validate(CLUSTER, POOL, run_id="night-2")  # the same nodes: the images are on them
    warm = rows("night-2")["fabric"]["details"]
    assert {p["stages"]["image_pull"] for p in warm["stages"]["pairs"]} == {0.0}
    saved = cold["stages"]["gpu_minutes"]["image_pull"]
    assert saved == pytest.approx(6 * NCCL_PULL * GPUS / 60, abs=0.01)  # 6 pods, cold
    assert warm["gpu_minutes"] == pytest.approx(cold["gpu_minutes"] - saved, abs=0.05)
    # another pool's nodes, with the onboarding DaemonSet applied first: warm on night 1
    ref = load_catalog().pool(CLUSTER, "h200-b")
    for ds in render_image_prepull(ref.cluster):
        cluster_backend(ref.cluster).apply(ds)
    validate(CLUSTER, "h200-b", run_id="night-1b")
    row = Ledger().latest_validation(CLUSTER, "h200-b", "fabric")
    assert {p["stages"]["image_pull"] for p in row["details"]["stages"]["pairs"]} == {0.0}
