"""The fleet catalog: the shipped files load, and each rule fails with file, path and reason."""

from __future__ import annotations

import copy
import os
from pathlib import Path

import pytest
import yaml

from gpufleet.config.catalog import load_catalog
from gpufleet.config.catalog_index import build_index, catalog_index
from gpufleet.errors import CatalogError

ROOT = Path(__file__).resolve().parents[2]

VALID = {
    "regions": [
        {
            "name": "r1",
            "reservations": [
                {"name": "res-1", "machine_type": "a3-ultragpu-8g", "count": 4, "blocks": ["b1"]}
            ],
            "clusters": [
                {
                    "name": "c1",
                    "provider": "sim",
                    "sim": {"mimics": "gke"},
                    "project": "p",
                    "location": "us-central1-b",
                    "network": {
                        "name": "net",
                        "rdma_nics": 2,
                        "subnets": [
                            {"name": "s0", "cidr": "10.0.0.0/24"},
                            {"name": "s1", "cidr": "10.0.1.0/24"},
                        ],
                    },
                    "node_pools": [
                        {
                            "name": "p1",
                            "machine_type": "a3-ultragpu-8g",
                            "gpu": {"model": "H200", "count": 8},
                            "nodes": 4,
                            "reservation": {"name": "res-1", "block": "b1"},
                            "transport": "gib",
                            "filesystem": "fs1",
                        }
                    ],
                    "filesystems": [
                        {
                            "name": "fs1",
                            "kind": "managed-lustre",
                            "capacity_tib": 18,
                            "throughput_mbps_per_tib": 1000,
                        }
                    ],
                }
            ],
        }
    ],
}


def write(tmp_path: Path, doc: dict, name: str = "fleet.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(doc))
    return path


def load_error(tmp_path: Path, mutate) -> str:
    doc = copy.deepcopy(VALID)
    mutate(doc)
    path = write(tmp_path, doc)
    with pytest.raises(CatalogError) as err:
        load_catalog(tmp_path)
    message = str(err.value)
    assert message.startswith(str(path)), message  # every error names the file
    return message


def cluster(doc):
    return doc["regions"][0]["clusters"][0]


def pool(doc):
    return cluster(doc)["node_pools"][0]


def test_shipped_sample_fleet_loads_with_both_shapes():
    catalog = load_catalog(ROOT / "include" / "fleet")
    shapes = {c.shape for _, c in catalog.clusters.values()}
    assert shapes == {"gke", "eks"}
    assert all(c.provider == "sim" for _, c in catalog.clusters.values())
    a3u = catalog.pool("a3u-sim", "h200-a")
    assert (a3u.pool.gpu.model, a3u.pool.gpu.count, a3u.pool.transport) == ("H200", 8, "gib")
    assert a3u.cluster.network.rdma_nics == 8 and len(a3u.cluster.network.subnets) == 8
    assert a3u.filesystem.kind == "managed-lustre"
    p5 = catalog.pool("p5-sim", "h100-a")
    assert (p5.pool.transport, p5.filesystem.kind) == ("ofi-efa", "fsx-lustre")


def test_real_examples_load():
    catalog = load_catalog(ROOT / "include" / "fleet-examples")
    assert {c.provider for _, c in catalog.clusters.values()} == {"gke", "eks"}


def test_valid_minimal_catalog(tmp_path):
    write(tmp_path, VALID)
    catalog = load_catalog(tmp_path)
    assert [r.key for r in catalog.pools()] == ["c1/p1"]
    assert catalog.pool("c1", "p1").filesystem.expected_mb_s == 18000


def test_unknown_provider(tmp_path):
    msg = load_error(tmp_path, lambda d: cluster(d).update(provider="azure"))
    assert "regions[0].clusters[0].provider" in msg and "'azure'" in msg


def test_unknown_transport(tmp_path):
    msg = load_error(tmp_path, lambda d: pool(d).update(transport="carrier-pigeon"))
    assert "node_pools[0].transport" in msg and "carrier-pigeon" in msg


def test_transport_the_provider_cannot_deliver(tmp_path):
    msg = load_error(tmp_path, lambda d: pool(d).update(transport="ofi-efa"))
    assert "node_pools[0].transport" in msg and "gke" in msg


def test_pool_whose_reservation_is_missing(tmp_path):
    msg = load_error(tmp_path, lambda d: pool(d).update(reservation={"name": "nope"}))
    assert "node_pools[0].reservation" in msg
    assert "'nope' is not declared in region 'r1' (declared: res-1)" in msg


def test_reservation_block_missing(tmp_path):
    msg = load_error(tmp_path, lambda d: pool(d)["reservation"].update(block="b9"))
    assert "reservation.block" in msg and "'b9'" in msg


def test_machine_type_differs_from_reservation(tmp_path):
    msg = load_error(tmp_path, lambda d: pool(d).update(machine_type="a3-megagpu-8g"))
    assert "node_pools[0].machine_type" in msg and "a3-ultragpu-8g" in msg


@pytest.mark.parametrize(
    "where,name",
    [
        ("region", "R1"),
        ("cluster", "c_1"),
        ("pool", "-p1"),
        ("pool", "x" * 64),
    ],
)
def test_non_dns1123_names(tmp_path, where, name):
    def mutate(d):
        target = {"region": d["regions"][0], "cluster": cluster(d), "pool": pool(d)}[where]
        target["name"] = name

    msg = load_error(tmp_path, mutate)
    assert "DNS-1123" in msg and ".name" in msg


@pytest.mark.parametrize(
    "field_path,value",
    [
        (("nodes",), -1),
        (("nodes",), 0),
        (("gpu", "count"), -8),
    ],
)
def test_negative_pool_sizes(tmp_path, field_path, value):
    def mutate(d):
        target = pool(d)
        for key in field_path[:-1]:
            target = target[key]
        target[field_path[-1]] = value

    msg = load_error(tmp_path, mutate)
    assert "node_pools[0]." + ".".join(field_path) in msg and "greater than 0" in msg


def test_negative_filesystem_capacity(tmp_path):
    msg = load_error(tmp_path, lambda d: cluster(d)["filesystems"][0].update(capacity_tib=-1))
    assert "filesystems[0].capacity_tib" in msg


def test_negative_nic_count(tmp_path):
    msg = load_error(tmp_path, lambda d: cluster(d)["network"].update(rdma_nics=-2))
    assert "network.rdma_nics" in msg


def test_duplicate_pool(tmp_path):
    msg = load_error(tmp_path, lambda d: cluster(d)["node_pools"].append(copy.deepcopy(pool(d))))
    assert "node_pools[1].name" in msg and "duplicate node pool 'p1'" in msg


def test_duplicate_reservation(tmp_path):
    def mutate(d):
        d["regions"][0]["reservations"].append(copy.deepcopy(d["regions"][0]["reservations"][0]))

    msg = load_error(tmp_path, mutate)
    assert "reservations[1].name" in msg and "duplicate" in msg


def test_duplicate_cluster_across_files(tmp_path):
    write(tmp_path, VALID, "a.yaml")
    other = copy.deepcopy(VALID)
    other["regions"][0]["name"] = "r2"
    path = write(tmp_path, other, "b.yaml")
    with pytest.raises(CatalogError, match="duplicate cluster 'c1'") as err:
        load_catalog(tmp_path)
    assert str(err.value).startswith(str(path)) and "a.yaml" in str(err.value)


def test_duplicate_region_across_files(tmp_path):
    write(tmp_path, VALID, "a.yaml")
    other = copy.deepcopy(VALID)
    cluster(other)["name"] = "c2"
    write(tmp_path, other, "b.yaml")
    with pytest.raises(CatalogError, match="duplicate region 'r1'"):
        load_catalog(tmp_path)


def test_gke_needs_one_subnet_per_nic(tmp_path):
    msg = load_error(tmp_path, lambda d: cluster(d)["network"]["subnets"].pop())
    assert "network.subnets" in msg and "2 NICs but 1 subnets" in msg


def test_bad_cidr(tmp_path):
    msg = load_error(tmp_path, lambda d: cluster(d)["network"]["subnets"][0].update(cidr="10.0/99"))
    assert "subnets[0].cidr" in msg


def test_unknown_field_is_a_typo(tmp_path):
    msg = load_error(tmp_path, lambda d: pool(d).update(nodez=4))
    assert "node_pools[0].nodez" in msg and "unknown field" in msg


def test_burn_in_is_off_unless_the_catalog_asks(tmp_path):
    write(tmp_path, VALID)
    assert load_catalog(tmp_path).pool("c1", "p1").pool.burn_in is False
    doc = copy.deepcopy(VALID)
    pool(doc)["burn_in"] = True
    write(tmp_path, doc)
    assert load_catalog(tmp_path).pool("c1", "p1").pool.burn_in is True


@pytest.mark.parametrize("value", ["yes", "true", "false", 1, 0, 4, None, [True]])
def test_burn_in_is_true_or_false_nothing_a_lax_reading_would_take_for_one(tmp_path, value):
    msg = load_error(tmp_path, lambda d: pool(d).update(burn_in=value))
    assert f"node_pools[0].burn_in: true or false, not {value!r}" in msg


def test_filesystem_kind_must_match_provider(tmp_path):
    msg = load_error(tmp_path, lambda d: cluster(d)["filesystems"][0].update(kind="fsx-lustre"))
    assert "filesystems[0].kind" in msg


def test_pool_filesystem_must_exist(tmp_path):
    msg = load_error(tmp_path, lambda d: pool(d).update(filesystem="nfs"))
    assert "node_pools[0].filesystem" in msg


def test_provider_specific_fields(tmp_path):
    msg = load_error(tmp_path, lambda d: cluster(d).pop("sim"))
    assert "needs a 'sim' section" in msg


def test_unknown_sim_fault(tmp_path):
    msg = load_error(tmp_path, lambda d: cluster(d)["sim"].update(faults={"p1": ["meteor"]}))
    assert "sim.faults.p1" in msg and "meteor" in msg


def test_invalid_yaml(tmp_path):
    (tmp_path / "bad.yaml").write_text("regions: [\n  - name: x\n")
    with pytest.raises(CatalogError, match="not valid YAML"):
        load_catalog(tmp_path)


def test_lookups_name_the_known_values(tmp_path):
    write(tmp_path, VALID)
    catalog = load_catalog(tmp_path)
    with pytest.raises(CatalogError, match=r"unknown cluster 'cx' \(clusters: c1\)"):
        catalog.cluster("cx")
    with pytest.raises(CatalogError, match=r"no node pool 'px' \(pools: p1\)"):
        catalog.pool("c1", "px")
    with pytest.raises(CatalogError, match="no node pool matches zz"):
        list(catalog.pools(pools=["zz"]))


def test_index_cache_follows_file_changes(tmp_path, fleet_state):
    path = write(tmp_path, VALID)
    first = catalog_index(tmp_path)
    assert first["pool_names"] == ["p1"] and (fleet_state / "catalog-index.json").exists()
    doc = copy.deepcopy(VALID)
    extra = copy.deepcopy(pool(doc))
    extra["name"] = "p2"
    cluster(doc)["node_pools"].append(extra)
    before = path.stat().st_mtime_ns
    path.write_text(yaml.safe_dump(doc))
    os.utime(path, ns=(before + 10**9, before + 10**9))  # an edit a second later, not a sleep
    assert catalog_index(tmp_path)["pool_names"] == ["p1", "p2"]
    assert catalog_index(tmp_path) == build_index(load_catalog(tmp_path))


@pytest.mark.parametrize(
    "where,field,value",
    [
        ("region", "name", "r1\n"),
        ("cluster", "name", "c1\n"),
        ("pool", "name", "p1\n"),
        ("cluster", "namespaces", ["ml-team\n"]),
        ("cluster", "kubernetes_version", "1.30\n"),
    ],
)
def test_a_name_with_a_trailing_newline_is_refused(tmp_path, where, field, value):
    """``$`` matches before a final newline in Python: each pattern must match the whole."""

    def mutate(d):
        target = {"region": d["regions"][0], "cluster": cluster(d), "pool": pool(d)}[where]
        target[field] = value

    msg = load_error(tmp_path, mutate)
    assert field in msg


def test_a_ten_thousand_character_name_is_echoed_cut_short(tmp_path):
    def mutate(d):
        pool(d)["name"] = "p" * 10_000

    msg = load_error(tmp_path, mutate)
    assert "10000 chars" in msg and len(msg) < 1_000, len(msg)
