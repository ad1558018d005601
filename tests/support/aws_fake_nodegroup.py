"""The test harness's EKS managed node group, played over moto's EC2.

moto runs EC2 instances but has no Auto Scaling behind an EKS node group: a terminated
instance stays terminated. ``NodeGroupPlayer`` does what the group's Auto Scaling group
does: it launches the group's instances (tagged as EKS tags them: ``eks:cluster-name``,
``eks:nodegroup-name``) in one zone, and when the fake sees one of them terminated
(``AwsFake.on_instances_terminated``) it launches a replacement with the same type, zone and
tags, recorded in ``replacements`` (old id -> new id). Its own EC2 calls go to moto directly,
not through the fake's front, so ``AwsFake.requests`` holds only what the code under test
sent.
"""

from __future__ import annotations

import threading

import boto3

from tests.support.aws_fake import AwsFake

IMAGE = "ami-03cf127a"  # one of moto's bundled Amazon images


class NodeGroupPlayer:
    def __init__(
        self,
        fake: AwsFake,
        cluster: str,
        nodegroup: str,
        instance_type: str = "p5.48xlarge",
        zone: str = "us-east-1a",
    ) -> None:
        self.cluster = cluster
        self.nodegroup = nodegroup
        self.instance_type = instance_type
        self.zone = zone
        self.members: list[str] = []
        self.replacements: dict[str, str] = {}
        self._lock = threading.Lock()
        self.ec2 = boto3.client(
            "ec2",
            endpoint_url=f"http://127.0.0.1:{fake.moto_port}",
            region_name=fake.region,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )
        fake.on_instances_terminated(self._replace)

    def launch(self, count: int = 1) -> list[str]:
        """Start ``count`` instances of the group; their ids."""
        tags = [
            {"Key": "eks:cluster-name", "Value": self.cluster},
            {"Key": "eks:nodegroup-name", "Value": self.nodegroup},
        ]
        answer = self.ec2.run_instances(
            ImageId=IMAGE,
            MinCount=count,
            MaxCount=count,
            InstanceType=self.instance_type,
            Placement={"AvailabilityZone": self.zone},
            TagSpecifications=[{"ResourceType": "instance", "Tags": tags}],
        )
        ids = [i["InstanceId"] for i in answer["Instances"]]
        with self._lock:
            self.members.extend(ids)
        return ids

    def provider_id(self, instance_id: str) -> str:
        """The ``spec.providerID`` the instance's node registers with."""
        return f"aws:///{self.zone}/{instance_id}"

    def state(self, instance_id: str) -> str:
        found = self.ec2.describe_instances(InstanceIds=[instance_id])["Reservations"]
        return found[0]["Instances"][0]["State"]["Name"]

    def _replace(self, instance_ids: list[str]) -> None:
        for old in instance_ids:
            with self._lock:
                if old not in self.members or old in self.replacements:
                    continue
                self.members.remove(old)
            (new,) = self.launch(1)
            with self._lock:
                self.replacements[old] = new
