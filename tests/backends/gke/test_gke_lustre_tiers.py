"""Managed Lustre capacities follow Google's current "Performance tiers" table
(https://cloud.google.com/managed-lustre/docs/performance-tiers): the 1000 MB/s per TiB tier
holds up to 10,008,000 GiB (steps of 9,000 GiB up to 1,530,000, then 72,000), and the Dynamic
tier (catalog tier 25) is created with ``dynamicTierOptions`` and no per-unit throughput. The
instance goes through the real lustre_v1 client to the strict fake."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gpufleet.backends.base import EnsureAction
from gpufleet.backends.gke import GkeCloudBackend
from gpufleet.backends.gke.lustre import capacity_gib
from gpufleet.config.catalog import parse_catalog_file
from gpufleet.errors import CatalogError
from tests.support.gcp_fake import GcpFake

EXAMPLE = Path(__file__).resolve().parents[3] / "include/fleet-examples/gke-a3-ultra.yaml"
FS = "lustre-usc1"


@pytest.mark.parametrize(
    ("tib", "tier", "gib"),
    [
        (36, 500, 36_000),
        (1_000, 1000, 1_026_000),  # 9,000 GiB steps below 1,530,000
        (2_000, 1000, 2_016_000),  # past 954,000 GiB: 72,000 GiB steps above 1,530,000
        (9_000, 1000, 9_216_000),
        (10_000, 250, 10_368_000),  # 288,000 GiB steps above 6,120,000
        (1_000, 25, 944_000),  # Dynamic: 472,000 GiB steps
        (80_000, 25, 82_128_000),
    ],
)
def test_capacity_follows_the_current_tier_table(tib, tier, gib):
    assert capacity_gib(tib, tier) == gib


def test_too_large_for_the_tier_is_refused_naming_the_limit():
    with pytest.raises(CatalogError, match="at most 10008000 GiB"):
        capacity_gib(10_000, 1000)
    with pytest.raises(CatalogError, match="tier 50 MB/s per TiB does not exist"):
        capacity_gib(100, 50)


def backend_for(tmp_path, fake: GcpFake, tib: float, tier: int) -> GkeCloudBackend:
    data = yaml.safe_load(EXAMPLE.read_text())
    (fs,) = data["regions"][0]["clusters"][0]["filesystems"]
    fs.update(capacity_tib=tib, throughput_mbps_per_tib=tier)
    path = tmp_path / EXAMPLE.name
    path.write_text(yaml.safe_dump(data))
    region = parse_catalog_file(path)[0]
    backend = GkeCloudBackend(region.clusters[0], region, endpoint=fake.url, poll_interval=0)
    backend.ensure_network()
    return backend


@pytest.mark.parametrize(("tib", "tier"), [(2_000, 1000), (1_000, 25)])
def test_the_api_accepts_what_the_tiers_allow_and_a_second_pass_finds_it(tmp_path, tib, tier):
    with GcpFake(operation_polls=1) as fake:
        backend = backend_for(tmp_path, fake, tib, tier)
        assert backend.ensure_filesystem(FS).action == EnsureAction.CREATED
        (body,) = fake.bodies("POST", r"/instances$")
        assert body["capacityGib"] == str(capacity_gib(tib, tier))
        if tier == 25:
            assert body["dynamicTierOptions"]["mode"] in (2, "DEFAULT_CACHE")  # int enum
            assert int(body.get("perUnitStorageThroughput", 0)) == 0
        else:
            assert body["perUnitStorageThroughput"] == str(tier)
        assert backend.get_filesystem(FS).throughput_mbps_per_tib == tier
        again = backend.ensure_filesystem(FS)
        assert (again.action, again.differences) == (EnsureAction.FOUND, ())
