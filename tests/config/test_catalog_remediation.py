"""The catalog's remediation settings (docs/catalog.md, docs/remediation.md): a pool's
behaviour profile and the fleet's ``remediation`` block, checked as strictly as the rest."""

from __future__ import annotations

import pytest
import yaml

from gpufleet.config.catalog import check_catalog_files, load_catalog
from gpufleet.domain.remediation import RemediationPolicy
from tests.support.fleet import ROOT

SIM = ROOT / "include" / "fleet" / "sim.yaml"


def write(folder, name: str, change) -> None:
    data = yaml.safe_load(SIM.read_text())
    change(data)
    folder.mkdir(exist_ok=True)
    (folder / name).write_text(yaml.safe_dump(data))


def _pool(data: dict) -> dict:
    return data["regions"][0]["clusters"][0]["node_pools"][0]


def test_the_defaults_are_remediate_and_the_documented_policy():
    catalog = load_catalog(SIM.parent)
    assert catalog.remediation == RemediationPolicy()
    assert {r.pool.profile for r in catalog.pools()} == {"remediate"}
    policy = catalog.remediation
    assert (policy.max_reboots, policy.window_days, policy.dry_run) == (2, 7, False)
    assert policy.breakers.pool.limit(10) == 2 and policy.breakers.cluster.limit(40) == 4


def test_a_pool_profile_and_the_fleet_policy_are_read(tmp_path):
    def change(data):
        _pool(data)["profile"] = "observe"
        data["remediation"] = {
            "dry_run": True,
            "breakers": {"pool": {"absolute": 1, "percent": 50}},
        }

    write(tmp_path, "sim.yaml", change)
    catalog = load_catalog(tmp_path)
    assert catalog.pool("a3u-sim", "h200-a").pool.profile == "observe"
    assert catalog.remediation.dry_run and catalog.remediation.breakers.pool.limit(10) == 5


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (lambda d: _pool(d).update(profile="fix-everything"), "profile"),
        (lambda d: d.update(remediation={"dry_run": "yes"}), "dry_run"),
        (lambda d: d.update(remediation={"max_reboot": 3}), "max_reboot"),
        (
            lambda d: d.update(remediation={"breakers": {"pool": {"absolute": 2, "percent": 120}}}),
            "percent",
        ),
    ],
)
def test_bad_remediation_settings_are_refused(tmp_path, change, words):
    write(tmp_path, "sim.yaml", change)
    problems = check_catalog_files([tmp_path / "sim.yaml"])
    assert problems and words in problems[0]


def test_the_remediation_block_is_set_in_one_file_at_most(tmp_path):
    def first(data):
        data["remediation"] = {"dry_run": True}
        data["regions"] = data["regions"][:1]

    def second(data):
        data["remediation"] = {"dry_run": False}
        data["regions"] = data["regions"][1:]
        data.pop("gpu_models", None)

    write(tmp_path, "a.yaml", first)
    write(tmp_path, "b.yaml", second)
    problems = check_catalog_files(sorted(tmp_path.glob("*.yaml")))
    assert any("remediation" in p and "one file" in p for p in problems), problems
