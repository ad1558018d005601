"""The fleet ``bench/nightly_scale.py`` validates: the generated catalog loads with its pools'
level-1 rotation, and ``prepull`` leaves it as ``region_onboarding`` would, every validation
image kept on every node by the pre-pull DaemonSet (a steady night: no pod pulls)."""

from __future__ import annotations

import os

from bench.fleetgen import generate_catalog
from bench.nightly_scale import prepull


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
