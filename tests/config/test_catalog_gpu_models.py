"""The catalog's ``gpu_models`` (issue 31 item 4): per GPU model, the highest ``dcgmi diag``
level and each level's hard timeout, over built-in defaults; strict like the rest of the
catalog: unknown keys, non-levels, non-whole or out-of-range seconds and a model set twice are
refused with the file, the path and what to do."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest

from gpufleet.config.catalog import load_catalog
from gpufleet.domain.health.tiers import DEFAULT_DIAG_TIMEOUT_S, diag_timeout
from gpufleet.errors import CatalogError
from tests.config.test_catalog import ROOT, VALID, load_error, write


def test_the_shipped_catalogs_set_their_models():
    sim = load_catalog(ROOT / "include" / "fleet")
    assert sim.dcgm_limits("H200").max_level == 4
    assert dict(sim.dcgm_limits("H200").timeouts_s) == dict(DEFAULT_DIAG_TIMEOUT_S)
    examples = load_catalog(ROOT / "include" / "fleet-examples")
    assert examples.dcgm_limits("B200").max_level == 1
    assert diag_timeout(examples.dcgm_limits("h100"), 2) == 900


def test_a_model_not_listed_gets_the_built_in_defaults(tmp_path):
    write(tmp_path, VALID)
    catalog = load_catalog(tmp_path)
    assert catalog.gpu_models == {}
    assert catalog.dcgm_limits("GB200").max_level == 1  # NVIDIA/DCGM#247
    assert catalog.dcgm_limits("H200").max_level == 4


def test_settings_override_the_defaults_level_by_level(tmp_path):
    doc = copy.deepcopy(VALID)
    doc["gpu_models"] = {"h200": {"dcgm_max_level": 2, "dcgm_timeout_s": {1: 60}}}
    write(tmp_path, doc)
    limits = load_catalog(tmp_path).dcgm_limits("H200")  # names are case-insensitive
    assert limits.max_level == 2 and "gpu_models" in limits.why
    assert dict(limits.timeouts_s) == {**DEFAULT_DIAG_TIMEOUT_S, 1: 60}


@pytest.mark.parametrize(
    ("models", "match"),
    [
        ({"H200": {"dcgm_max_levl": 2}}, r"gpu_models\.H200\.dcgm_max_levl: unknown field"),
        ({"H200": {"dcgm_max_level": 5}}, "must be a dcgmi diag level: 1, 2, 3 or 4, not 5"),
        ({"H200": {"dcgm_max_level": True}}, "must be a whole number, not True"),
        ({"H200": {"dcgm_max_level": "2"}}, "must be a whole number, not '2'"),
        ({"H200": {"dcgm_timeout_s": {7: 60}}}, "7 is not a dcgmi diag level"),
        ({"H200": {"dcgm_timeout_s": {2: 0}}}, r"dcgm_timeout_s\[2\]: 0 s is outside"),
        ({"H200": {"dcgm_timeout_s": {2: 1e9}}}, "must be a whole number"),
        ({"H200": {"dcgm_timeout_s": [900]}}, "must map a level to seconds"),
        ({"H200": {}, "h200": {}}, "are the same model"),
        ({" ": {}}, "needs a name"),
    ],
)
def test_bad_gpu_models_are_refused(tmp_path, models, match):
    message = load_error(tmp_path, lambda doc: doc.update(gpu_models=models))
    assert "gpu_models" in message
    assert re.search(match, message), message


def test_a_model_set_in_two_files_is_refused(tmp_path):
    first = copy.deepcopy(VALID)
    first["gpu_models"] = {"H200": {"dcgm_max_level": 3}}
    second = copy.deepcopy(VALID)
    second["regions"][0]["name"] = "r2"
    second["regions"][0]["clusters"][0]["name"] = "c2"
    second["gpu_models"] = {"h200": {"dcgm_max_level": 2}}
    write(tmp_path, first, "a.yaml")
    write(tmp_path, second, "b.yaml")
    with pytest.raises(CatalogError, match=r"b\.yaml: gpu_models\.h200: .* also set in .*a\.yaml"):
        load_catalog(tmp_path)


def test_the_catalog_object_reads_models_case_insensitively(tmp_path: Path):
    doc = copy.deepcopy(VALID)
    doc["gpu_models"] = {"B200": {"dcgm_max_level": 2}}
    write(tmp_path, doc)
    assert load_catalog(tmp_path).dcgm_limits("b200").max_level == 2


def test_a_pool_resolved_by_the_catalog_carries_its_models_limits(tmp_path):
    """What the health round plans with (``PoolRef.dcgm_limits``): the catalog's settings for
    the pool's model, whichever lookup resolved the pool."""
    doc = copy.deepcopy(VALID)
    doc["gpu_models"] = {"H200": {"dcgm_max_level": 1, "dcgm_timeout_s": {1: 300}}}
    write(tmp_path, doc)
    catalog = load_catalog(tmp_path)
    cluster = next(iter(catalog.clusters))
    for ref in (catalog.pool(cluster, "p1"), *catalog.pools()):
        assert ref.dcgm_limits.max_level == 1
        assert diag_timeout(ref.dcgm_limits, 1) == 300


def test_a_models_limits_are_built_once_per_catalog(tmp_path):
    """Every pool of a model carries the same limits object: resolving 2,000 pools does not
    build 2,000 of them."""
    write(tmp_path, VALID)
    catalog = load_catalog(tmp_path)
    assert catalog.dcgm_limits("H200") is catalog.dcgm_limits("H200")
    refs = list(catalog.pools())
    assert all(ref.dcgm_limits is catalog.dcgm_limits(ref.pool.gpu.model) for ref in refs)
