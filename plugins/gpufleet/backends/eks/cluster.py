"""The EKS control plane: the cluster itself, Airflow's access entry and the bearer token.

A cluster is created with ``accessConfig.authenticationMode = API_AND_CONFIG_MAP`` so that
access entries work: gpufleet reaches a cluster it has just created through an access entry
for Airflow's principal with ``AmazonEKSClusterAdminPolicy`` at cluster scope, and a token
made exactly as ``aws eks get-token`` makes it (a presigned STS ``GetCallerIdentity`` URL
carrying the ``x-k8s-aws-id`` header), so no Kubernetes connection must exist beforehand.
"""

from __future__ import annotations

import base64
import re
import time
from typing import Any

from gpufleet.backends.base import (
    ClusterCredentials,
    ClusterInfo,
    EnsureAction,
    Ensured,
    ResourceStatus,
)
from gpufleet.backends.eks.clients import AwsApiError, AwsClients, console_url, not_found
from gpufleet.backends.eks.network import NetworkIds, check_network
from gpufleet.domain.fleet import Cluster
from gpufleet.errors import BackendError

CLUSTER_STATUS = {
    "CREATING": ResourceStatus.CREATING,
    "PENDING": ResourceStatus.CREATING,
    "ACTIVE": ResourceStatus.READY,
    "UPDATING": ResourceStatus.UPDATING,
    "DELETING": ResourceStatus.DELETING,
    "FAILED": ResourceStatus.ERROR,
}
ADMIN_POLICY = "arn:aws:eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy"
AUTH_MODE = "API_AND_CONFIG_MAP"
TOKEN_PREFIX = "k8s-aws-v1."
URL_TIMEOUT = 60  # seconds the presigned URL is valid for, as `aws eks get-token`
TOKEN_LIFETIME = 14 * 60  # EKS accepts a token for 15 minutes; get-token reports 14
CLUSTER_NAME_HEADER = "x-k8s-aws-id"

_ASSUMED_ROLE = re.compile(r"^arn:(aws[a-z-]*):sts::(\d{12}):assumed-role/([^/]+)/.+$")


def principal_arn(caller_arn: str) -> str:
    """The IAM ARN an access entry takes for a caller: an STS assumed-role session
    (``arn:aws:sts::1:assumed-role/R/s``) becomes its role (``arn:aws:iam::1:role/R``)."""
    match = _ASSUMED_ROLE.fullmatch(caller_arn)
    if match:
        partition, account, role = match.groups()
        return f"arn:{partition}:iam::{account}:role/{role}"
    return caller_arn


def eks_token(sts_client: Any, cluster_name: str) -> str:
    """A Kubernetes bearer token for an EKS cluster, as ``aws eks get-token`` makes it:
    ``k8s-aws-v1.`` + base64url (no padding) of a presigned STS GetCallerIdentity URL whose
    signature covers the ``x-k8s-aws-id: <cluster>`` header."""
    events = sts_client.meta.events

    def _add_header(request: Any, **_: Any) -> None:
        request.headers[CLUSTER_NAME_HEADER] = cluster_name

    events.register_first("before-sign.sts.GetCallerIdentity", _add_header)
    try:
        url = sts_client.generate_presigned_url(
            "get_caller_identity", Params={}, ExpiresIn=URL_TIMEOUT, HttpMethod="GET"
        )
    finally:
        events.unregister("before-sign.sts.GetCallerIdentity", _add_header)
    encoded = base64.urlsafe_b64encode(url.encode("utf-8")).decode("ascii").rstrip("=")
    return TOKEN_PREFIX + encoded


class EksControlPlane:
    """The cluster, its access entry and credentials."""

    def __init__(self, clients: AwsClients, cluster: Cluster) -> None:
        self.clients = clients
        self.cluster = cluster
        self.region = cluster.location

    @property
    def url(self) -> str:
        return console_url(
            self.region, f"eks/home?region={self.region}#/clusters/{self.cluster.name}"
        )

    def describe(self) -> dict[str, Any] | None:
        try:
            return self.clients.call(
                "eks",
                "describe_cluster",
                f"read cluster {self.cluster.name!r}",
                name=self.cluster.name,
            )["cluster"]
        except AwsApiError as exc:
            if not_found(exc):
                return None
            raise

    def info(self) -> ClusterInfo:
        found = self.describe()
        if found is None:
            return ClusterInfo(self.cluster.name, ResourceStatus.ABSENT, console_url=self.url)
        return self._info(found)

    def _info(self, found: dict[str, Any]) -> ClusterInfo:
        mode = (found.get("accessConfig") or {}).get("authenticationMode")
        return ClusterInfo(
            name=self.cluster.name,
            status=CLUSTER_STATUS.get(found.get("status", ""), ResourceStatus.ERROR),
            endpoint=found.get("endpoint"),
            version=found.get("version"),
            features={"access_entries": mode in ("API", AUTH_MODE)},
            console_url=self.url,
        )

    def ensure(self, network: NetworkIds | None, dry_run: bool = False) -> Ensured:
        check_network(self.cluster)
        found = self.describe()
        if found is not None:
            return self._found(found)
        if dry_run:
            return Ensured(
                "cluster",
                self.cluster.name,
                EnsureAction.WOULD_CREATE,
                ResourceStatus.ABSENT,
                console_url=self.url,
            )
        if network is None:
            raise BackendError(f"cluster {self.cluster.name!r}: ensure the network first")
        iam = self.cluster.iam
        assert iam is not None  # the catalog requires it for eks
        params: dict[str, Any] = {
            "name": self.cluster.name,
            "roleArn": iam.cluster_role_arn,
            "resourcesVpcConfig": {
                "subnetIds": network.subnet_ids(self.cluster),
                "securityGroupIds": [network.require_security_group(self.cluster)],
                "endpointPublicAccess": True,
                "endpointPrivateAccess": True,
            },
            # Access is granted explicitly by ensure_access_entry (tested, idempotent), not
            # implicitly to whoever happened to create the cluster.
            "accessConfig": {
                "authenticationMode": AUTH_MODE,
                "bootstrapClusterCreatorAdminPermissions": False,
            },
            "tags": {"gpufleet.io/cluster": self.cluster.name},
        }
        if self.cluster.kubernetes_version:
            params["version"] = self.cluster.kubernetes_version
        try:
            created = self.clients.call(
                "eks", "create_cluster", f"create cluster {self.cluster.name!r}", **params
            )["cluster"]
        except AwsApiError as exc:
            if exc.code != "ResourceInUseException":
                raise
            found = self.describe()  # created meanwhile (a retried create): report it
            if found is None:
                raise
            return self._found(found)
        info = self._info(created)
        return Ensured(
            "cluster",
            self.cluster.name,
            EnsureAction.CREATED,
            info.status,
            console_url=self.url,
            detail={"arn": created.get("arn"), "version": created.get("version")},
        )

    def _found(self, found: dict[str, Any]) -> Ensured:
        info = self._info(found)
        diffs = []
        want = self.cluster.kubernetes_version
        if want and found.get("version") and found["version"] != want:
            diffs.append(f"kubernetes version: catalog {want}, cloud {found['version']}")
        iam = self.cluster.iam
        if iam and found.get("roleArn") and found["roleArn"] != iam.cluster_role_arn:
            diffs.append(f"cluster role: catalog {iam.cluster_role_arn}, cloud {found['roleArn']}")
        mode = (found.get("accessConfig") or {}).get("authenticationMode")
        if mode == "CONFIG_MAP":
            raise BackendError(
                f"cluster {self.cluster.name!r} exists with authenticationMode CONFIG_MAP: "
                "gpufleet reaches clusters through access entries, which need API or "
                "API_AND_CONFIG_MAP. Switch it with `aws eks update-cluster-config --name "
                f"{self.cluster.name} --access-config authenticationMode={AUTH_MODE}`."
            )
        return Ensured(
            "cluster",
            self.cluster.name,
            EnsureAction.FOUND,
            info.status,
            tuple(diffs),
            console_url=self.url,
            detail={"arn": found.get("arn"), "version": found.get("version")},
        )

    def airflow_principal(self) -> str:
        iam = self.cluster.iam
        if iam and iam.airflow_principal_arn:
            return iam.airflow_principal_arn
        caller = self.clients.call("sts", "get_caller_identity", "find Airflow's AWS identity")
        return principal_arn(caller["Arn"])

    def ensure_access_entry(self, dry_run: bool = False) -> Ensured:
        """An access entry for Airflow's principal with the cluster-admin access policy at
        cluster scope; creates only what is missing (entry, policy association)."""
        name = self.cluster.name
        principal = self.airflow_principal()
        what = f"access entry of {principal} on cluster {name!r}"
        created: list[str] = []
        try:
            self.clients.call(
                "eks",
                "describe_access_entry",
                f"read {what}",
                clusterName=name,
                principalArn=principal,
            )
            have_entry = True
        except AwsApiError as exc:
            if not not_found(exc):
                raise
            have_entry = False
        if not have_entry:
            if dry_run:
                return Ensured(
                    "access",
                    principal,
                    EnsureAction.WOULD_CREATE,
                    ResourceStatus.ABSENT,
                    console_url=self.url,
                )
            try:
                self.clients.call(
                    "eks",
                    "create_access_entry",
                    f"create {what}",
                    clusterName=name,
                    principalArn=principal,
                    type="STANDARD",
                    tags={"gpufleet.io/cluster": name},
                )
            except AwsApiError as exc:
                if exc.code != "ResourceInUseException":  # created meanwhile: fine
                    raise
            created.append("entry")
        policies = (
            []
            if not have_entry
            else self.clients.call(
                "eks",
                "list_associated_access_policies",
                f"read policies of {what}",
                clusterName=name,
                principalArn=principal,
            ).get("associatedAccessPolicies", [])
        )
        has_admin = any(
            p.get("policyArn") == ADMIN_POLICY
            and (p.get("accessScope") or {}).get("type") == "cluster"
            for p in policies
        )
        if not has_admin:
            if dry_run:
                return Ensured(
                    "access",
                    principal,
                    EnsureAction.WOULD_CREATE,
                    ResourceStatus.ABSENT,
                    console_url=self.url,
                    detail={"missing": "AmazonEKSClusterAdminPolicy association"},
                )
            self.clients.call(
                "eks",
                "associate_access_policy",
                f"grant cluster admin to {what}",
                clusterName=name,
                principalArn=principal,
                policyArn=ADMIN_POLICY,
                accessScope={"type": "cluster"},
            )
            created.append("AmazonEKSClusterAdminPolicy")
        return Ensured(
            "access",
            principal,
            EnsureAction.CREATED if created else EnsureAction.FOUND,
            ResourceStatus.READY,
            console_url=self.url,
            detail={"created": created, "policy": ADMIN_POLICY},
        )

    def credentials(self) -> ClusterCredentials:
        found = self.describe()
        if found is None:
            raise BackendError(
                f"cluster {self.cluster.name!r} does not exist in {self.region}; run "
                "ensure_cluster first"
            )
        status = CLUSTER_STATUS.get(found.get("status", ""), ResourceStatus.ERROR)
        if status != ResourceStatus.READY or not found.get("endpoint"):
            raise BackendError(
                f"cluster {self.cluster.name!r} is {found.get('status')}, not ACTIVE: its API "
                "server cannot be reached yet; wait for it (get_cluster) and try again"
            )
        self.ensure_access_entry()
        token = eks_token(self.clients.client("sts"), self.cluster.name)
        return ClusterCredentials(
            server=found["endpoint"],
            token=token,
            ca_data=(found.get("certificateAuthority") or {}).get("data"),
            expires_at=time.time() + TOKEN_LIFETIME,
        )
