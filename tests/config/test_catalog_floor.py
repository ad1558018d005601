"""A pool's floor in the catalog (``min_serving_nodes``, docs/catalog.md,
docs/remediation.md#approvals): 0 by default, read when set, refused when it is not a count."""

from __future__ import annotations

import pytest

from gpufleet.config.catalog import check_catalog_files, load_catalog
from tests.config.test_catalog_remediation import SIM, _pool, write


def test_no_floor_by_default_and_a_floor_is_read(tmp_path):
    assert {r.pool.min_serving_nodes for r in load_catalog(SIM.parent).pools()} == {0}
    write(tmp_path, "sim.yaml", lambda d: _pool(d).update(min_serving_nodes=4))
    floors = {r.key: r.pool.min_serving_nodes for r in load_catalog(tmp_path).pools()}
    assert floors["a3u-sim/h200-a"] == 4


@pytest.mark.parametrize("value", [-1, "four", 1.5, None])
def test_a_floor_that_is_not_a_count_is_refused(tmp_path, value):
    write(tmp_path, "sim.yaml", lambda d: _pool(d).update(min_serving_nodes=value))
    problems = check_catalog_files([tmp_path / "sim.yaml"])
    assert problems and "min_serving_nodes" in problems[0], problems
