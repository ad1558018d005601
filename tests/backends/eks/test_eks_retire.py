"""Deleting an EKS node group for good (a transition's retire step) through boto3 against moto:
the delete is issued once, the group counts as gone only when DescribeNodegroup says so, and a
delete EKS failed (DELETE_FAILED) is reported with the group's health issues, not as gone."""

from __future__ import annotations

import pytest
from eks_catalog import POOL, eks_region, seed_block
from test_eks_provisioning import provision

from gpufleet.backends.base import ResourceStatus
from gpufleet.backends.eks import EksCloudBackend


@pytest.fixture
def backend(aws):
    seed_block(aws)
    region, cluster = eks_region()
    backend = EksCloudBackend(cluster, region)
    provision(backend)
    aws.clear_log()
    return backend


def test_the_group_is_gone_only_when_eks_says_so_and_a_resume_does_not_delete_again(aws, backend):
    first = backend.ensure_node_pool_deleted(POOL)
    assert (first.status, first.requested) == (ResourceStatus.DELETING, True) and first.operation
    assert [p["nodegroupName"] for p in aws.sent("DeleteNodegroup")] == [POOL]

    resumed = backend.ensure_node_pool_deleted(POOL, first.operation)
    assert resumed.status == ResourceStatus.ABSENT and not resumed.requested
    assert len(aws.sent("DeleteNodegroup")) == 1  # waited on, never deleted twice
    assert aws.actions("eks")[-1] == "DescribeNodegroup"


def test_a_delete_eks_failed_is_an_error_with_its_reason(aws, backend):
    aws.set_nodegroup_status(
        POOL, "DELETE_FAILED", [{"code": "Ec2SecurityGroupDeletionFailure", "message": "in use"}]
    )
    failed = backend.ensure_node_pool_deleted(POOL, "delete_nodegroup")
    assert failed.status == ResourceStatus.ERROR
    assert failed.message == "Ec2SecurityGroupDeletionFailure: in use"
    assert aws.sent("DeleteNodegroup") == []

    again = backend.ensure_node_pool_deleted(POOL)  # nothing of ours under way: delete again
    assert again.requested and len(aws.sent("DeleteNodegroup")) == 1
