"""The EKS cluster's network: the VPC (tag ``Name`` = ``network.name``), its subnets (CIDR,
availability zone, tag ``Name``) and the EFA security group.

EFA needs a security group that allows all traffic to and from itself: the launch template
puts every EFA interface in it, and the FSx filesystem too, so Lustre traffic flows between
nodes and the filesystem without opening anything else. An EKS control plane needs subnets
in at least two availability zones: a network with fewer is refused before any call.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Any

from gpufleet.backends.base import EnsureAction, Ensured, ResourceStatus
from gpufleet.backends.eks.clients import AwsClients, console_url, tag
from gpufleet.domain.fleet import Cluster
from gpufleet.errors import BackendError, CatalogError


def security_group_name(cluster: Cluster) -> str:
    return f"{cluster.network.name}-efa"


def vpc_cidr(cluster: Cluster) -> str:
    """The smallest block covering every catalog subnet: the VPC's CIDR. AWS allows /16 to /28."""
    nets = [ipaddress.ip_network(s.cidr) for s in cluster.network.subnets]
    block = nets[0]
    # typeshed's subnet_of takes the same address family only; a catalog mixing IPv4 and IPv6
    # subnets raises TypeError here (EKS's VPC CIDR is IPv4)
    while not all(n.subnet_of(block) for n in nets):  # type: ignore[arg-type]
        block = block.supernet()
    if block.prefixlen < 16:
        raise CatalogError(
            f"cluster {cluster.name!r}: the subnets of network {cluster.network.name!r} span "
            f"{block}, wider than the /16 an AWS VPC allows; keep them inside one /16"
        )
    return str(block)


def check_network(cluster: Cluster) -> None:
    """Refuse a catalog network EKS cannot use, before any call: every subnet needs a zone and
    the control plane needs subnets in two availability zones."""
    net = cluster.network
    missing = [s.name for s in net.subnets if not s.zone]
    if missing:
        raise CatalogError(
            f"cluster {cluster.name!r}: EKS subnets need an availability zone; set 'zone' on "
            f"network.subnets {', '.join(missing)}"
        )
    zones = sorted({s.zone for s in net.subnets if s.zone})
    if len(zones) < 2:
        have = ", ".join(f"{s.name} ({s.cidr}, {s.zone})" for s in net.subnets) or "none"
        raise CatalogError(
            f"cluster {cluster.name!r}: an EKS control plane needs subnets in at least two "
            f"availability zones, network {net.name!r} has {have}. Add a subnet in a second "
            "zone of the region to network.subnets (for example split 10.0.0.0/16 into "
            "10.0.0.0/17 in the reservation's zone and 10.0.128.0/17 in another)"
        )
    vpc_cidr(cluster)


@dataclass(frozen=True)
class NetworkIds:
    """The ids of the network's parts as they exist now (None: absent)."""

    vpc: str | None
    subnets: dict[str, str]  # catalog subnet name -> subnet id
    security_group: str | None

    def subnet_ids(self, cluster: Cluster, zone: str | None = None) -> list[str]:
        """Ids of the catalog's subnets (those in ``zone`` only, when given), in catalog order;
        refuses when one is missing (the network is not ensured yet)."""
        wanted = [s for s in cluster.network.subnets if zone is None or s.zone == zone]
        if zone is not None and not wanted:
            have = ", ".join(f"{s.name} ({s.zone})" for s in cluster.network.subnets)
            raise CatalogError(
                f"cluster {cluster.name!r}: no subnet in availability zone {zone} (subnets: "
                f"{have}); add one in {zone} to network.subnets"
            )
        missing = [s.name for s in wanted if s.name not in self.subnets]
        if missing or self.vpc is None:
            raise BackendError(
                f"cluster {cluster.name!r}: network {cluster.network.name!r} is not ready "
                f"(missing: {', '.join(missing) or 'the VPC'}); run ensure_network first"
            )
        return [self.subnets[s.name] for s in wanted]

    def require_security_group(self, cluster: Cluster) -> str:
        if self.security_group is None:
            raise BackendError(
                f"cluster {cluster.name!r}: security group {security_group_name(cluster)!r} "
                "does not exist; run ensure_network first"
            )
        return self.security_group


def _self_rule(rules: list[dict[str, Any]], group_id: str) -> bool:
    return any(
        r.get("IpProtocol") == "-1"
        and any(p.get("GroupId") == group_id for p in r.get("UserIdGroupPairs") or ())
        for r in rules
    )


class EksNetwork:
    """Reads and ensures the VPC, subnets and EFA security group of one cluster."""

    def __init__(self, clients: AwsClients, cluster: Cluster) -> None:
        self.clients = clients
        self.cluster = cluster
        self.region = cluster.location

    def _find_vpc(self) -> dict[str, Any] | None:
        name = self.cluster.network.name
        vpcs = self.clients.call(
            "ec2",
            "describe_vpcs",
            f"find VPC {name!r}",
            Filters=[{"Name": "tag:Name", "Values": [name]}],
        )["Vpcs"]
        if len(vpcs) > 1:
            ids = ", ".join(v["VpcId"] for v in vpcs)
            raise BackendError(
                f"more than one VPC is tagged Name={name!r} ({ids}); gpufleet cannot tell which "
                "one the catalog means: rename or delete the extra ones"
            )
        return vpcs[0] if vpcs else None

    def _subnets(self, vpc_id: str) -> list[dict[str, Any]]:
        return self.clients.call(
            "ec2",
            "describe_subnets",
            f"list subnets of {vpc_id}",
            Filters=[{"Name": "vpc-id", "Values": [vpc_id]}],
        )["Subnets"]

    def _security_group(self, vpc_id: str) -> dict[str, Any] | None:
        name = security_group_name(self.cluster)
        groups = self.clients.call(
            "ec2",
            "describe_security_groups",
            f"find security group {name!r}",
            Filters=[
                {"Name": "vpc-id", "Values": [vpc_id]},
                {"Name": "group-name", "Values": [name]},
            ],
        )["SecurityGroups"]
        return groups[0] if groups else None

    def ids(self) -> NetworkIds:
        """What exists now, read only."""
        vpc = self._find_vpc()
        if vpc is None:
            return NetworkIds(None, {}, None)
        by_cidr = {s["CidrBlock"]: s for s in self._subnets(vpc["VpcId"])}
        subnets = {
            s.name: by_cidr[s.cidr]["SubnetId"]
            for s in self.cluster.network.subnets
            if s.cidr in by_cidr
        }
        group = self._security_group(vpc["VpcId"])
        return NetworkIds(vpc["VpcId"], subnets, group["GroupId"] if group else None)

    def ensure(self, dry_run: bool = False) -> list[Ensured]:
        check_network(self.cluster)
        out: list[Ensured] = []
        net = self.cluster.network
        cidr = vpc_cidr(self.cluster)
        vpc = self._find_vpc()
        if vpc is None:
            if dry_run:
                out.append(
                    self._ensured(
                        "network", net.name, EnsureAction.WOULD_CREATE, detail={"cidr": cidr}
                    )
                )
                out += [
                    self._ensured(
                        "subnet", s.name, EnsureAction.WOULD_CREATE, detail={"cidr": s.cidr}
                    )
                    for s in net.subnets
                ]
                out.append(
                    self._ensured(
                        "firewall", security_group_name(self.cluster), EnsureAction.WOULD_CREATE
                    )
                )
                return out
            vpc = self._create_vpc(cidr)
            out.append(self._vpc_ensured(vpc, EnsureAction.CREATED, ()))
        else:
            blocks = [
                a["CidrBlock"]
                for a in vpc.get("CidrBlockAssociationSet") or [{"CidrBlock": vpc["CidrBlock"]}]
            ]
            outside = [
                s
                for s in net.subnets
                if not any(
                    # one address family assumed, as vpc_cidr's
                    ipaddress.ip_network(s.cidr).subnet_of(ipaddress.ip_network(b))  # type: ignore[arg-type]
                    for b in blocks
                )
            ]
            diffs = tuple(
                f"subnet {s.name} {s.cidr}: outside the VPC's CIDR ({', '.join(blocks)})"
                for s in outside
            )
            out.append(self._vpc_ensured(vpc, EnsureAction.FOUND, diffs))
            if outside:
                raise BackendError(
                    f"VPC {vpc['VpcId']} ({net.name}) holds {', '.join(blocks)}; the catalog's "
                    f"subnet(s) {', '.join(s.name + ' ' + s.cidr for s in outside)} cannot be "
                    "created in it. Fix network.subnets or the VPC's CIDR."
                )
        vpc_id = vpc["VpcId"]
        out += self._ensure_subnets(vpc_id, dry_run)
        out.append(self._ensure_security_group(vpc_id, dry_run))
        return out

    def _create_vpc(self, cidr: str) -> dict[str, Any]:
        name = self.cluster.network.name
        vpc = self.clients.call(
            "ec2",
            "create_vpc",
            f"create VPC {name!r}",
            CidrBlock=cidr,
            TagSpecifications=[{"ResourceType": "vpc", "Tags": self._tags(name)}],
        )["Vpc"]
        # EKS nodes resolve the private API endpoint and register by DNS hostname.
        for attr in ("EnableDnsSupport", "EnableDnsHostnames"):
            self.clients.call(
                "ec2",
                "modify_vpc_attribute",
                f"enable {attr} on VPC {name!r}",
                VpcId=vpc["VpcId"],
                **{attr: {"Value": True}},
            )
        return vpc

    def _ensure_subnets(self, vpc_id: str, dry_run: bool) -> list[Ensured]:
        existing = {s["CidrBlock"]: s for s in self._subnets(vpc_id)}
        out = []
        for spec in self.cluster.network.subnets:
            found = existing.get(spec.cidr)
            if found is None:
                if dry_run:
                    out.append(
                        self._ensured(
                            "subnet",
                            spec.name,
                            EnsureAction.WOULD_CREATE,
                            detail={"cidr": spec.cidr},
                        )
                    )
                    continue
                found = self.clients.call(
                    "ec2",
                    "create_subnet",
                    f"create subnet {spec.name!r}",
                    VpcId=vpc_id,
                    CidrBlock=spec.cidr,
                    AvailabilityZone=spec.zone,
                    TagSpecifications=[{"ResourceType": "subnet", "Tags": self._tags(spec.name)}],
                )["Subnet"]
                action = EnsureAction.CREATED
                diffs: tuple[str, ...] = ()
            else:
                action = EnsureAction.FOUND
                diffs = tuple(
                    d
                    for d in (
                        f"subnet {spec.name} zone: catalog {spec.zone}, cloud "
                        f"{found.get('AvailabilityZone')}"
                        if found.get("AvailabilityZone") != spec.zone
                        else None,
                        f"subnet {spec.name} Name tag: catalog {spec.name}, cloud {tag(found)}"
                        if tag(found) != spec.name
                        else None,
                    )
                    if d
                )
            sid = found["SubnetId"]
            out.append(
                self._ensured(
                    "subnet",
                    spec.name,
                    action,
                    diffs,
                    url=f"vpcconsole/home?region={self.region}#SubnetDetails:subnetId={sid}",
                    detail={"id": sid, "cidr": spec.cidr, "zone": found.get("AvailabilityZone")},
                )
            )
        return out

    def _ensure_security_group(self, vpc_id: str, dry_run: bool) -> Ensured:
        name = security_group_name(self.cluster)
        group = self._security_group(vpc_id)
        if group is None and dry_run:
            return self._ensured("firewall", name, EnsureAction.WOULD_CREATE)
        action = EnsureAction.FOUND
        if group is None:
            gid = self.clients.call(
                "ec2",
                "create_security_group",
                f"create security group {name!r}",
                GroupName=name,
                Description=(
                    f"gpufleet {self.cluster.name}: EFA and Lustre traffic between members"
                ),
                VpcId=vpc_id,
                TagSpecifications=[{"ResourceType": "security-group", "Tags": self._tags(name)}],
            )["GroupId"]
            group = {"GroupId": gid, "IpPermissions": [], "IpPermissionsEgress": []}
            action = EnsureAction.CREATED
        gid = group["GroupId"]
        # The self-referencing rules are part of the group: added when missing (a rerun after
        # a failure between the create and the authorize completes the group).
        added = []
        self_pair = [{"IpProtocol": "-1", "UserIdGroupPairs": [{"GroupId": gid}]}]
        if not _self_rule(group.get("IpPermissions") or [], gid):
            if dry_run:
                added.append("would add ingress all-from-self")
            else:
                self.clients.call(
                    "ec2",
                    "authorize_security_group_ingress",
                    f"allow all traffic within {name!r}",
                    GroupId=gid,
                    IpPermissions=self_pair,
                )
                added.append("ingress all-from-self")
        if not _self_rule(group.get("IpPermissionsEgress") or [], gid):
            if dry_run:
                added.append("would add egress all-to-self")
            else:
                self.clients.call(
                    "ec2",
                    "authorize_security_group_egress",
                    f"allow all traffic within {name!r}",
                    GroupId=gid,
                    IpPermissions=self_pair,
                )
                added.append("egress all-to-self")
        return self._ensured(
            "firewall",
            name,
            action,
            url=f"ec2/home?region={self.region}#SecurityGroup:groupId={gid}",
            detail={"id": gid, "rules_added": added},
        )

    def _vpc_ensured(
        self, vpc: dict[str, Any], action: EnsureAction, diffs: tuple[str, ...]
    ) -> Ensured:
        vid = vpc["VpcId"]
        return self._ensured(
            "network",
            self.cluster.network.name,
            action,
            diffs,
            url=f"vpcconsole/home?region={self.region}#VpcDetails:VpcId={vid}",
            detail={"id": vid, "cidr": vpc.get("CidrBlock")},
        )

    def _ensured(
        self,
        kind: str,
        name: str,
        action: EnsureAction,
        diffs: tuple[str, ...] = (),
        url: str | None = None,
        detail: dict[str, Any] | None = None,
    ) -> Ensured:
        return Ensured(
            kind=kind,
            name=name,
            action=action,
            status=(
                ResourceStatus.ABSENT
                if action == EnsureAction.WOULD_CREATE
                else ResourceStatus.READY
            ),
            differences=diffs,
            console_url=console_url(self.region, url or self._list_page(kind)),
            detail=detail or {},
        )

    def _list_page(self, kind: str) -> str:
        """The console's list of that kind of resource (for what does not exist yet)."""
        if kind == "firewall":
            return f"ec2/home?region={self.region}#SecurityGroups:"
        page = "subnets" if kind == "subnet" else "vpcs"
        return f"vpcconsole/home?region={self.region}#{page}:"

    def _tags(self, name: str) -> list[dict[str, str]]:
        return [
            {"Key": "Name", "Value": name},
            {"Key": "gpufleet.io/cluster", "Value": self.cluster.name},
        ]
