"""The EKS backend's boto3 sessions share what botocore reads from disk: every backend object
has its own session, and the service models and endpoints are megabytes of JSON."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from botocore.loaders import JSONFileLoader

from gpufleet.backends.eks import clients
from gpufleet.backends.eks.clients import AwsClients


@pytest.fixture
def file_reads(monkeypatch) -> list[str]:
    """The botocore data files read from now on, with this process's loaders forgotten."""
    monkeypatch.setattr(clients, "_LOADERS", {})
    reads: list[str] = []
    load_file = JSONFileLoader.load_file

    def counted(self, file_path):
        reads.append(file_path)
        return load_file(self, file_path)

    monkeypatch.setattr(JSONFileLoader, "load_file", counted)
    return reads


def list_vpcs(region: str = "us-east-1") -> list[bool]:
    """Whether each VPC of the region is its default one."""
    vpcs = AwsClients(region).call("ec2", "describe_vpcs", "listing the VPCs")["Vpcs"]
    return [vpc["IsDefault"] for vpc in vpcs]


def test_a_second_backend_object_reads_no_model_again(aws, file_reads):
    list_vpcs()
    read = " ".join(file_reads)
    assert "ec2" in read and "endpoints" in read, file_reads
    file_reads.clear()
    assert list_vpcs("us-west-2") == [True]  # a new session, another region: answered as ever
    assert file_reads == []


def test_sessions_of_another_data_path_read_their_own(aws, file_reads, monkeypatch, tmp_path):
    list_vpcs()
    file_reads.clear()
    monkeypatch.setenv("AWS_DATA_PATH", str(tmp_path))  # models a user put there come first
    list_vpcs()
    assert any("ec2" in path for path in file_reads), file_reads


def test_sessions_made_in_threads_at_once_all_work(aws, file_reads):
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda _: list_vpcs(), range(16)))
    assert answers == [[True]] * 16  # each region has its default VPC
