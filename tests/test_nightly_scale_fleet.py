"""The fleet ``bench/nightly_scale.py`` validates: the generated catalog loads with its pools'
level-1 rotation, and ``prepull`` leaves it as ``region_onboarding`` would, every validation
image kept on every node by the pre-pull DaemonSet (a steady night: no pod pulls)."""

from __future__ import annotations

import os

from bench.fleetgen import generate_catalog
from bench.nightly_scale import prepull, waits_per_pool


def test_a_generated_fleet_after_prepull_holds_every_validation_image(tmp_path, monkeypatch):
    from gpufleet.backends.sim.run_times import prepulled_images
    from gpufleet.backends.sim.state import SimState
    from gpufleet.config.catalog import load_catalog
    from gpufleet.manifests.addons.prepull import validation_images

    catalog, state = tmp_path / "fleet", tmp_path / "state"
    generate_catalog(catalog, 40, per_cluster=20)
    before = dict(os.environ)
    assert prepull(catalog, state) == 2
    assert dict(os.environ) == before  # the bench's own environment is left as it was
    monkeypatch.setenv("GPUFLEET_CATALOG_DIR", str(catalog))
    monkeypatch.setenv("GPUFLEET_STATE_DIR", str(state))
    fleet = load_catalog()
    assert {r.pool.level1_every_nights for r in fleet.pools()} == {4}
    with SimState().read() as conn:
        for name, (_, cluster) in fleet.clusters.items():
            assert set(validation_images(cluster)) <= prepulled_images(conn, name)


def _row(kind, pool, details):
    return {"cluster": "c", "pool": pool, "kind": kind, "details": details}


def test_the_waits_per_pool_are_counted_from_the_nights_rows():
    pair = {"nodes": ["a", "b"], "stages": {}}
    own = {"a": {"stages": {"container_start": 1.0, "diag_r1": 33.0}}}  # a pod of its own
    step = {"a": {"stages": {"diag_r1": 33.0}}, "b": {"stages": {}}}  # in its pair's pod
    rows = [
        # p1: the checks in the pairs' pods, one NCCL round, the pool check in them too
        _row("health", "p1", {"nodes": step}),
        _row("fabric", "p1", {"stages": {"pairs": [{**pair, "round": 0}, {**pair, "round": 0}]}}),
        _row("storage", "p1", {"stages": {"nodes": {"a": {}}, "ran_in": "fabric pairs"}}),
        # p2: a health round, pass 1 and one localization round, the full test's own pods
        _row("health", "p2", {"nodes": own}),
        _row("fabric", "p2", {"stages": {"pairs": [{**pair, "round": 0}, {**pair, "round": 1}]}}),
        _row("storage", "p2", {"stages": {"nodes": {"a": {}}}}),
    ]
    w = waits_per_pool(rows)
    assert w == {"pools": 2, "health": 0.5, "nccl": 1.5, "fio": 0.5, "all": 2.5}
