"""Catalog input a platform team gets wrong: every number bounded, duplicate keys refused,
unreadable files named, and ``gpufleet catalog check`` listing every problem (exit 0/2)."""

from __future__ import annotations

import copy
import os
from pathlib import Path

import pytest
import yaml

from gpufleet.cli import main
from gpufleet.config.catalog import check_catalog_files, load_catalog, parse_catalog_file
from gpufleet.errors import CatalogError
from tests.config.test_catalog import VALID

ROOT = Path(__file__).resolve().parents[2]


def _write(path: Path, data) -> Path:
    path.write_text(yaml.safe_dump(data) if not isinstance(data, str) else data)
    return path


def _pool(data):
    return data["regions"][0]["clusters"][0]["node_pools"][0]


def _fs(data):
    return data["regions"][0]["clusters"][0]["filesystems"][0]


@pytest.mark.parametrize(
    ("edit", "where", "words"),
    [
        (lambda d: _fs(d).update(capacity_tib=float("inf")), "capacity_tib", "finite"),
        (lambda d: _fs(d).update(capacity_tib=float("nan")), "capacity_tib", "finite"),
        (lambda d: _fs(d).update(capacity_tib=1e9), "capacity_tib", "less than or equal"),
        (lambda d: _pool(d).update(nodes=100_000_000), "nodes", "less than or equal"),
        (lambda d: _pool(d)["gpu"].update(count=10_000), "gpu.count", "less than or equal"),
        (lambda d: _pool(d).update(tolerance=float("nan")), "tolerance", "finite"),
        (
            lambda d: d["regions"][0]["reservations"][0].update(count=10**12),
            "reservations[0].count",
            "less than or equal",
        ),
        (
            lambda d: _fs(d).update(throughput_mbps_per_tib=10**9),
            "throughput_mbps_per_tib",
            "less than or equal",
        ),
    ],
)
def test_every_number_is_bounded(tmp_path, edit, where, words):
    data = copy.deepcopy(VALID)
    edit(data)
    path = tmp_path / "fleet.yaml"
    # yaml.safe_dump writes .inf/.nan, which YAML reads back as floats
    _write(path, data)
    with pytest.raises(CatalogError) as err:
        parse_catalog_file(path)
    assert str(path) in str(err.value) and where in str(err.value) and words in str(err.value)


def test_a_duplicate_key_is_refused_not_last_one_wins(tmp_path):
    text = yaml.safe_dump(VALID).replace("nodes: 4\n", "nodes: 4\n      nodes: 400\n", 1)
    assert "nodes: 400" in text
    path = _write(tmp_path / "fleet.yaml", text)
    with pytest.raises(CatalogError, match=r"duplicate key 'nodes'"):
        parse_catalog_file(path)


def test_non_utf8_and_broken_symlink_are_one_line_errors(tmp_path):
    folder = tmp_path / "fleet"
    folder.mkdir()
    _write(folder / "a.yaml", VALID)
    (folder / "b.yaml").symlink_to(tmp_path / "gone.yaml")
    with pytest.raises(CatalogError, match=r"b\.yaml: cannot read: .*broken symlink"):
        load_catalog(folder)
    (folder / "b.yaml").unlink()
    (folder / "b.yaml").write_bytes(b"regions:\n  - name: \xff\xfe\n")
    with pytest.raises(CatalogError, match=r"b\.yaml: not UTF-8 text"):
        load_catalog(folder)


def test_check_lists_every_problem_with_file_and_path(tmp_path, capsys):
    bad = copy.deepcopy(VALID)
    _pool(bad).update(nodes=0)
    _fs(bad).update(capacity_tib=-1)
    a = _write(tmp_path / "a.yaml", bad)
    b = _write(tmp_path / "b.yaml", "regions: [\n")
    good = _write(tmp_path / "c.yaml", VALID)
    before = {p: p.read_bytes() for p in (a, b, good)}
    code = main(["catalog", "check", str(a), str(b), str(good)])
    err = capsys.readouterr().err
    assert code == 2
    assert f"{a}: regions[0].clusters[0].node_pools[0].nodes:" in err
    assert f"{a}: regions[0].clusters[0].filesystems[0].capacity_tib:" in err
    assert f"{b}: not valid YAML: line 2" in err
    assert str(good) not in err
    assert "3 problem(s) in 3 catalog file(s)" in err
    assert "Traceback" not in err
    assert {p: p.read_bytes() for p in (a, b, good)} == before  # a check changes nothing


def test_check_reports_names_duplicated_across_files(tmp_path):
    a = _write(tmp_path / "a.yaml", VALID)
    b = _write(tmp_path / "b.yaml", VALID)
    lines = check_catalog_files([a, b])
    assert any("duplicate region 'r1'" in line and str(b) in line for line in lines)


def test_check_passes_the_shipped_catalogs(capsys):
    assert main(["catalog", "check"]) == 0
    assert main(["catalog", "check", str(ROOT / "include" / "fleet-examples")]) == 0
    out = capsys.readouterr().out
    assert "eks-p5.yaml" in out and "gke-a3-ultra.yaml" in out


def test_check_of_a_folder_with_no_yaml_is_an_error(tmp_path, capsys):
    assert main(["catalog", "check", os.fspath(tmp_path)]) == 2
    assert "no catalog files" in capsys.readouterr().err
