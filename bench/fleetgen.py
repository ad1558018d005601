"""Generated fleet catalogs for the benchmarks: many sim clusters mimicking A3 Ultra."""

from __future__ import annotations

from pathlib import Path

import yaml


def generate_catalog(folder: Path, pools: int, per_cluster: int = 10, regions: int = 20) -> None:
    """``pools`` node pools: ``regions`` regions, clusters of ``per_cluster`` pools each."""
    clusters = max(pools // per_cluster, 1)
    out = []
    for r in range(regions):
        region = {"name": f"region-{r:02d}", "reservations": [], "clusters": []}
        for c in range(r, clusters, regions):
            cluster = {
                "name": f"cluster-{c:04d}",
                "provider": "sim",
                "sim": {"mimics": "gke"},
                "project": "bench",
                "location": "us-central1-b",
                "network": {
                    "name": f"net-{c:04d}",
                    "rdma_nics": 8,
                    "subnets": [{"name": f"rdma-{i}", "cidr": f"10.{i}.0.0/24"} for i in range(8)],
                },
                "node_pools": [],
                "filesystems": [
                    {
                        "name": "lustre",
                        "kind": "managed-lustre",
                        "capacity_tib": 18,
                        "throughput_mbps_per_tib": 1000,
                    }
                ],
            }
            for p in range(per_cluster):
                res = f"res-{c:04d}-{p}"
                region["reservations"].append(
                    {"name": res, "machine_type": "a3-ultragpu-8g", "count": 16}
                )
                cluster["node_pools"].append(
                    {
                        "name": f"pool-{p}",
                        "machine_type": "a3-ultragpu-8g",
                        "gpu": {"model": "H200", "count": 8},
                        "nodes": 16,
                        "reservation": {"name": res},
                        "transport": "gib",
                        "level1_every_nights": 4,  # as include/fleet/sim.yaml's pools
                        "filesystem": "lustre",
                    }
                )
            region["clusters"].append(cluster)
        if region["clusters"]:
            out.append(region)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "fleet.yaml").write_text(yaml.safe_dump({"regions": out}, sort_keys=False))
