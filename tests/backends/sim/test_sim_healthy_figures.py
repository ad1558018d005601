"""The simulated fleet's healthy figures come from its own model (include/sim), never from the
baselines the verdicts use: so a wrong baseline fails a healthy pool, and the sim's figures
move only when its model does."""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

import pytest
import yaml

from gpufleet.backends.sim import performance
from gpufleet.config.baselines import load_baselines
from gpufleet.config.catalog import load_catalog
from gpufleet.errors import BackendError
from tests.support.fleet import validate

ROOT = Path(__file__).resolve().parents[3]
SIM_PACKAGE = ROOT / "plugins" / "gpufleet" / "backends" / "sim"


@pytest.fixture
def include(tmp_path, monkeypatch, fleet_state):
    """A copy of include/ that GPUFLEET_INCLUDE_DIR points to, with no cached baselines."""
    copy = tmp_path / "include"
    shutil.copytree(ROOT / "include", copy)
    monkeypatch.setenv("GPUFLEET_INCLUDE_DIR", str(copy))
    load_baselines.cache_clear()
    yield copy
    load_baselines.cache_clear()


def _edit_yaml(path: Path, edit) -> None:
    data = yaml.safe_load(path.read_text())
    edit(data)
    path.write_text(yaml.safe_dump(data))


def _scale_baseline(include: Path, gpu_model: str, factor: float) -> float:
    scaled = []

    def edit(data):
        for b in data["baselines"]:
            if b["gpu_model"] == gpu_model and "gib" in b["transports"]:
                b["busbw_gbps"] *= factor
                scaled.append(b["busbw_gbps"])

    _edit_yaml(include / "baselines.yaml", edit)
    assert scaled
    return scaled[0]


def test_a_baseline_ten_times_too_high_fails_a_healthy_pool(include):
    healthy = validate("a3u-sim", "h200-b", run_id="true-baseline", storage=False)
    assert healthy["passed"], healthy["reasons"]
    measured = healthy["busbw_gbps"]

    _scale_baseline(include, "H200", 10)
    load_baselines.cache_clear()
    summary = validate("a3u-sim", "h200-b", run_id="wrong-baseline", storage=False)
    assert not summary["passed"]
    assert summary["transport"] == "gib"  # the fabric is fine: only the bandwidth misses
    # the sim reported what the hardware does, whatever the baseline said
    from gpufleet.store import Ledger

    row = next(r for r in Ledger().validations_for_run("wrong-baseline") if r["kind"] == "fabric")
    pairs = Ledger().pairs(row["id"])
    assert pairs and all(not p["passed"] for p in pairs)
    assert all(abs(p["busbw_gbps"] - measured) < 0.05 * measured for p in pairs)
    assert all(any("bus bandwidth" in r for r in p["reasons"]) for p in pairs)


def test_the_sims_figures_follow_its_own_model(include):
    """Halve the H200 figure in include/sim: the sim reports it, and the true baseline fails
    the pool. The baselines file is untouched."""

    def halve(data):
        for fig in data["rdma"]:
            if fig["gpu_model"] == "H200":
                fig["busbw_gbps"] = fig["busbw_gbps"] / 2

    _edit_yaml(include / "sim" / "fabric.yaml", halve)
    summary = validate("a3u-sim", "h200-b", run_id="half", storage=False)
    assert not summary["passed"]
    from gpufleet.store import Ledger

    row = next(r for r in Ledger().validations_for_run("half") if r["kind"] == "fabric")
    assert all(p["busbw_gbps"] < 0.55 * 355 for p in Ledger().pairs(row["id"]))


def test_a_shape_the_model_lacks_is_refused_not_guessed(include):
    def drop_h100(data):
        data["rdma"] = [f for f in data["rdma"] if f["gpu_model"] != "H100"]

    _edit_yaml(include / "sim" / "fabric.yaml", drop_h100)
    pool = load_catalog().pool("p5-sim", "h100-a").pool
    with pytest.raises(BackendError, match=r"no figure for 8xH100 over ofi-efa.*fabric\.yaml"):
        performance.rdma_link(pool, "ofi-efa")


def test_a_tier_the_product_does_not_sell_is_refused(include):
    fs = load_catalog().cluster("p5-sim").filesystem("fsx-p5")
    assert performance.filesystem_tier(fs).kind == "fsx-lustre"
    odd = fs.model_copy(update={"throughput_mbps_per_tib": 333})
    with pytest.raises(BackendError, match="sells no 333 MB/s per TiB tier"):
        performance.filesystem_tier(odd)


def test_every_figure_of_the_model_names_its_source(fleet_state):
    fabric, storage = performance.fabric_model(), performance.storage_model()
    assert fabric.rdma and storage.filesystems
    for item in (*fabric.rdma, fabric.sockets, *storage.filesystems):
        assert len(item.source.split()) >= 5


def test_the_sim_never_reads_the_baselines():
    """No module of the simulated fleet imports a baselines module."""
    for path in SIM_PACKAGE.glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            assert not any("baselines" in n for n in names), f"{path.name} imports {names}"
