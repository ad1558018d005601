"""The catalog's example EKS region for the contract tests, with the change EKS needs."""

from __future__ import annotations

from pathlib import Path

from gpufleet.config.catalog import parse_catalog_file
from gpufleet.domain.fleet import Cluster, Region, Subnet
from tests.support.aws_fake import AwsFake

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "include" / "fleet-examples" / "eks-p5.yaml"
RESERVATION = "cr-0123456789abcdef0"
POOL = "p5-cb-1"
FS = "fsx-use1"


def example_region() -> Region:
    """The example region as shipped."""
    return parse_catalog_file(EXAMPLE)[0]


def eks_region(**cluster_changes) -> tuple[Region, Cluster]:
    """The example region with the catalog change EKS needs: subnets in two zones (the
    control plane's requirement) and an FSx size FSx offers (37.5 TiB = 38400 GiB), unless
    the example already has them; ``cluster_changes`` override cluster fields."""
    region = example_region()
    cluster = region.clusters[0]
    net = cluster.network
    if len({s.zone for s in net.subnets}) < 2:
        net = net.model_copy(
            update={
                "subnets": (
                    Subnet(name="train-use1a", cidr="10.0.0.0/17", zone="us-east-1a"),
                    Subnet(name="train-use1b", cidr="10.0.128.0/17", zone="us-east-1b"),
                )
            }
        )
    fs = cluster.filesystems[0]
    if fs.capacity_tib * 1024 % 2400:
        fs = fs.model_copy(update={"capacity_tib": 37.5})
    cluster = cluster.model_copy(update={"network": net, "filesystems": (fs,), **cluster_changes})
    region = region.model_copy(update={"clusters": (cluster,)})
    return region, cluster


def seed_block(aws: AwsFake, kind: str = "capacity-block", available: int | None = None) -> None:
    aws.add_capacity_reservation(
        RESERVATION, "p5.48xlarge", 8, "us-east-1a", kind=kind, available=available
    )
