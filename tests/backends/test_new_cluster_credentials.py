"""The credential path of a cluster a DAG has just created, with no Kubernetes connection:
the cloud backend obtains the API server, its CA and a bearer token (GKE: endpoint, master CA
and an OAuth access token; EKS: Airflow's access entry and a ``k8s-aws-v1.`` token), and
``KubeClusterBackend.from_kube_config`` turns them into the official client's configuration.
Checked through the fakes end to end: what the kube client would send, not our own objects."""

from __future__ import annotations

import base64
import sys
import urllib.parse
from pathlib import Path

from gpufleet.backends.eks import EksCloudBackend
from gpufleet.backends.gke import GkeCloudBackend
from gpufleet.backends.gke.clients import ANONYMOUS_TOKEN
from gpufleet.backends.kube.cluster import KubeClusterBackend
from gpufleet.config.catalog import parse_catalog_file
from tests.support.gcp_fake import GcpFake

sys.path.insert(0, str(Path(__file__).parent / "eks"))
from eks_catalog import eks_region, seed_block  # noqa: E402
from test_eks_provisioning import provision  # noqa: E402

EXAMPLE = Path(__file__).resolve().parents[2] / "include/fleet-examples/gke-a3-ultra.yaml"
PEM = b"-----BEGIN CERTIFICATE-----\nMIIBfakeCAforgpufleet\n-----END CERTIFICATE-----\n"


def kube_configuration(credentials, name: str):
    """The kubernetes client Configuration the backend builds from the credentials."""
    backend = KubeClusterBackend.from_kube_config(credentials.kube_config(name))
    return backend.api_client.configuration


def header(config) -> tuple[str, str]:
    """The header the client sends for the bearer token (its auth settings)."""
    setting = config.auth_settings()["BearerToken"]
    assert setting["in"] == "header"
    return setting["key"], setting["value"]


def test_gke_credentials_become_a_kube_client_for_the_new_cluster():
    region = parse_catalog_file(EXAMPLE)[0]
    with GcpFake(operation_polls=1) as fake:
        fake.set_cluster_endpoint("34.118.0.10", base64.b64encode(PEM).decode())
        fake.add_cluster("my-gcp-project", "us-central1-b", "train-usc1")
        cloud = GkeCloudBackend(region.clusters[0], region, endpoint=fake.url)
        credentials = cloud.cluster_credentials()
    config = kube_configuration(credentials, "train-usc1")
    assert config.host == "https://34.118.0.10"  # GKE reports a bare IP: https is added
    assert Path(config.ssl_ca_cert).read_bytes() == PEM  # the master's CA, decoded
    assert config.verify_ssl is not False
    assert header(config) == ("authorization", f"Bearer {ANONYMOUS_TOKEN}")


def test_eks_access_entry_and_token_become_a_kube_client_for_the_new_cluster(aws):
    import boto3
    from botocore.auth import SigV4QueryAuth
    from botocore.awsrequest import AWSRequest

    seed_block(aws)
    region, cluster = eks_region()
    cloud = EksCloudBackend(cluster, region)
    provision(cloud)
    credentials = cloud.cluster_credentials()
    (entry,) = aws.sent("CreateAccessEntry")  # Airflow's principal may use the cluster
    assert entry["principalArn"] and entry.get("name", cluster.name) == cluster.name

    config = kube_configuration(credentials, cluster.name)
    found = boto3.client("eks").describe_cluster(name=cluster.name)["cluster"]
    assert config.host == found["endpoint"].rstrip("/")
    ca = base64.b64decode(found["certificateAuthority"]["data"])
    assert Path(config.ssl_ca_cert).read_bytes() == ca

    key, bearer = header(config)
    assert key == "authorization"
    assert bearer.startswith("Bearer k8s-aws-v1.") and "=" not in bearer
    payload = bearer.removeprefix("Bearer k8s-aws-v1.")
    url = base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)).decode()
    parts = urllib.parse.urlsplit(url)
    query = dict(urllib.parse.parse_qsl(parts.query))
    assert (query["Action"], query["X-Amz-Expires"]) == ("GetCallerIdentity", "60")
    assert query["X-Amz-SignedHeaders"].split(";") == ["host", "x-k8s-aws-id"]

    # The signature covers x-k8s-aws-id = this cluster's name (and no other): re-sign.
    def signature(cluster_name: str) -> str:
        unsigned = {k: v for k, v in query.items() if k != "X-Amz-Signature"}
        req = AWSRequest(
            method="GET",
            url=f"{parts.scheme}://{parts.netloc}{parts.path}?{urllib.parse.urlencode(unsigned)}",
            headers={"host": parts.netloc, "x-k8s-aws-id": cluster_name},
        )
        req.context["timestamp"] = query["X-Amz-Date"]
        creds = boto3.Session().get_credentials().get_frozen_credentials()
        auth = SigV4QueryAuth(creds, "sts", cluster.location, expires=60)
        return auth.signature(auth.string_to_sign(req, auth.canonical_request(req)), req)

    assert signature(cluster.name) == query["X-Amz-Signature"]
    assert signature("another-cluster") != query["X-Amz-Signature"]
