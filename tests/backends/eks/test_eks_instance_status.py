"""The EKS backend's EC2 instance status (``backends.eks.instance_status``): one
DescribeInstanceStatus request per round (``IncludeAllInstances``, the nodes' own instance ids,
followed through its pages) to moto through the AWS fake, which adds what moto lacks (failed
checks, scheduled events, in the API's XML); and the answers AWS documents
(tests/data/events/ec2/) read into the signals they must give."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from botocore.parsers import create_parser
from eks_catalog import POOL, eks_region

from gpufleet.backends.base import InstanceStatusSource
from gpufleet.backends.ec2_answers import instance_status_of
from gpufleet.backends.eks import EksCloudBackend
from gpufleet.backends.eks.instance_status import EksInstanceStatus, instance_id
from gpufleet.backends.instance_status import instance_status_source
from gpufleet.domain.signals import instance_signals
from gpufleet.services.nodes.readings import instance_of, instance_reading
from tests.support.aws_fake_handlers import _ec2_model
from tests.support.aws_fake_nodegroup import NodeGroupPlayer

CORPUS = Path(__file__).parents[2] / "data" / "events" / "ec2"
AT = datetime(2026, 12, 7, 10, 0, tzinfo=UTC)


@pytest.fixture
def source(aws) -> EksInstanceStatus:
    region, cluster = eks_region()
    return EksInstanceStatus(EksCloudBackend(cluster, region).clients)


@pytest.fixture
def group(aws) -> NodeGroupPlayer:
    _, cluster = eks_region()
    return NodeGroupPlayer(aws, cluster.name, POOL)


def test_an_eks_cluster_has_the_source(aws):
    _, cluster = eks_region()
    assert isinstance(instance_status_source(cluster), InstanceStatusSource)


def test_one_request_reads_the_nodes_instances_checks_and_events(aws, source, group):
    ok, host, guest, retiring = group.launch(4)
    aws.topology.impair(host)
    aws.topology.impair(guest, check="instance")
    aws.topology.schedule(
        retiring,
        "instance-retirement",
        "The instance is running on degraded hardware",
        "2026-12-09T00:00:00.000Z",
        event_id="instance-event-0e439355b779n26",
    )
    pids = [group.provider_id(i) for i in (ok, host, guest, retiring)]
    aws.requests.clear()
    found = source.instance_statuses(pids)
    (sent,) = aws.sent("DescribeInstanceStatus", "ec2")
    assert sent["IncludeAllInstances"] == "true"
    assert sorted(v for k, v in sent.items() if k.startswith("InstanceId.")) == sorted(
        [ok, host, guest, retiring]
    )
    assert set(found) == set(pids)
    assert instance_reading(found[pids[0]]) is None  # ok, nothing ahead: nothing to say
    assert found[pids[1]].system_status == "impaired" and found[pids[1]].system_impaired_since
    assert found[pids[2]].instance_status == "impaired"
    (event,) = found[pids[3]].events
    assert (event.code, event.event_id) == ("instance-retirement", "instance-event-0e439355b779n26")
    assert event.not_before == datetime(2026, 12, 9, tzinfo=UTC)
    said = {
        (s.source.value, s.what, s.response.value)
        for pid in pids[1:]
        for s in instance_signals("c", "n", instance_of(instance_reading(found[pid]) or {}), AT)
    }
    assert said == {
        ("ec2", "system-impaired", "quarantine"),
        ("ec2", "instance-impaired", "quarantine"),
        ("ec2", "instance-retirement", "quarantine"),
    }


def test_a_stopped_instance_is_reported_too(aws, source, group):
    (stopped,) = group.launch(1)
    group.ec2.stop_instances(InstanceIds=[stopped])
    found = source.instance_statuses([group.provider_id(stopped)])
    status = found[group.provider_id(stopped)]
    assert status.state == "stopped" and status.system_status == "not-applicable"


def test_an_instance_ec2_no_longer_knows_is_left_out_and_the_rest_read(aws, source, group):
    (alive,) = group.launch(1)
    gone = "aws:///us-east-1a/i-0123456789abcdef0"
    found = source.instance_statuses([group.provider_id(alive), gone])
    assert list(found) == [group.provider_id(alive)]
    assert len(aws.sent("DescribeInstanceStatus", "ec2")) == 2  # once more without it


def test_provider_ids_of_another_cloud_are_not_asked_for(aws, source):
    assert instance_id("aws:///us-east-1a/i-0123456789abcdef0") == "i-0123456789abcdef0"
    assert instance_id("gce://p/us-central1-a/vm") is None
    assert instance_id("aws:///us-east-1a/not-an-instance") is None
    assert source.instance_statuses(["gce://p/z/vm", "sim://c/n"]) == {}
    assert aws.sent("DescribeInstanceStatus", "ec2") == []


def test_more_than_100_instances_in_one_request_are_refused(aws, source):
    with pytest.raises(Exception, match="at most 100"):
        source.instance_statuses([f"aws:///us-east-1a/i-{i:017x}" for i in range(101)])


# --- the answers AWS documents ------------------------------------------------------------------


def test_the_api_references_example_reads_as_aws_means_it():
    text = (CORPUS / "api_reference_example.xml").read_text()
    text = text.replace("YYYY-MM-DDTHH:MM:SS.000Z", "2026-12-07T09:00:00.000Z")
    text = text.replace("YYYY-MM-DDTHH:MM:SS+0000", "2026-12-12T00:00:00+0000")
    shape = _ec2_model.operation_model("DescribeInstanceStatus").output_shape
    parsed = create_parser("ec2").parse(
        {"body": text.encode(), "headers": {}, "status_code": 200}, shape
    )
    statuses = {s.instance_id: s for s in map(instance_status_of, parsed["InstanceStatuses"])}
    said = {
        i: {
            (s.source.value, s.what, s.response.value) for s in instance_signals("c", i, status, AT)
        }
        for i, status in statuses.items()
    }
    assert said == {
        "i-1a2b3c4d": {
            ("ec2", "system-impaired", "quarantine"),
            ("ec2", "instance-impaired", "quarantine"),
            ("ec2", "instance-retirement", "quarantine"),
        },
        "i-2a2b3c4d": {("maintenance", "scheduled", "note")},  # a reboot ahead
        "i-3a2b3c4d": set(),
        "i-4a2b3c4d": set(),  # insufficient data is not evidence
    }
    assert statuses["i-1a2b3c4d"].system_impaired_since == datetime(2026, 12, 7, 9, tzinfo=UTC)
    assert instance_reading(statuses["i-3a2b3c4d"]) is None


@pytest.mark.parametrize(
    ("sample", "expect"),
    [
        ("user_guide_system_reboot.json", {("maintenance", "scheduled", "note")}),
        ("user_guide_instance_stop.json", {("ec2", "instance-stop", "quarantine")}),
        ("botocore_example_ok.json", set()),
    ],
)
def test_the_user_guides_and_botocores_examples(sample, expect):
    data = json.loads((CORPUS / sample).read_text())
    items = data.get("InstanceStatuses") or [{"InstanceId": "i-0abc", **data}]
    (status,) = [instance_status_of(i) for i in items]
    signals = instance_signals("c", "n", status, AT)
    assert {(s.source.value, s.what, s.response.value) for s in signals} == expect
    # the same status read again gives the same versions: recorded once
    assert [s.version for s in signals] == [
        s.version for s in instance_signals("c", "n", status, AT)
    ]


def test_an_event_that_is_over_says_nothing():
    item = {
        "InstanceId": "i-0abc",
        "Events": [{"Code": "system-reboot", "Description": "[Completed] scheduled reboot"}],
    }
    assert instance_signals("c", "n", instance_status_of(item), AT) == []
    assert instance_reading(instance_status_of(item)) is None
