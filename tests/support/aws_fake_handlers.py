"""What the AWS fake's front answers itself or adds to moto's answers (see ``aws_fake``)."""

from __future__ import annotations

import datetime as dt
import json
import random
import re
import string
import urllib.parse
import uuid
from typing import TYPE_CHECKING, Any
from xml.sax.saxutils import escape

import botocore.session

if TYPE_CHECKING:
    from tests.support.aws_fake import AwsFake, Injection

THROTTLE = {
    "ec2": (503, "RequestLimitExceeded"),
    "sts": (400, "Throttling"),
    "eks": (429, "ThrottlingException"),
    "fsx": (400, "ThrottlingException"),
}
EC2_NS = "http://ec2.amazonaws.com/doc/2016-11-15/"
_ec2_model = botocore.session.get_session().get_service_model("ec2")


def default_error_code(service: str, status: int) -> str:
    if status == 429:
        return THROTTLE.get(service, (429, "ThrottlingException"))[1]
    if status >= 500:
        return "Unavailable" if service == "ec2" else "ServiceUnavailableException"
    return "ValidationException"


def take_injection(fake: AwsFake, service: str, action: str) -> Injection | None:
    with fake.lock:
        for inj in fake.injections:
            if inj.service == service and inj.action in (action, "*") and inj.times > 0:
                inj.times -= 1
                return inj
    return None


def error_response(
    service: str, status: int, code: str, message: str, injection: Injection | None = None
) -> tuple[int, dict[str, str], bytes]:
    """An error in the service protocol's documented shape."""
    from tests.support.aws_fake import protocol

    rid = str(uuid.uuid4())
    headers = {"x-amzn-RequestId": rid}
    if injection is not None and injection.retry_after:
        headers["Retry-After"] = injection.retry_after
    proto = protocol(service)
    if proto == "ec2":
        body = (
            '<?xml version="1.0" encoding="UTF-8"?>\n<Response><Errors><Error>'
            f"<Code>{escape(code)}</Code><Message>{escape(message)}</Message>"
            f"</Error></Errors><RequestID>{rid}</RequestID></Response>"
        )
        return status, {**headers, "Content-Type": "text/xml"}, body.encode()
    if proto == "query":
        body = (
            "<ErrorResponse><Error><Type>Sender</Type>"
            f"<Code>{escape(code)}</Code><Message>{escape(message)}</Message>"
            f"</Error><RequestId>{rid}</RequestId></ErrorResponse>"
        )
        return status, {**headers, "Content-Type": "text/xml"}, body.encode()
    if proto == "json":
        body = json.dumps({"__type": code, "message": message})
        return status, {**headers, "Content-Type": "application/x-amz-json-1.1"}, body.encode()
    headers["x-amzn-ErrorType"] = code
    return (
        status,
        {**headers, "Content-Type": "application/json"},
        json.dumps({"message": message}).encode(),
    )


def _json(status: int, body: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
    return status, {"Content-Type": "application/json"}, json.dumps(body, default=str).encode()


# -- EC2 capacity reservations --------------------------------------------------------------


def _xml(shape: Any, value: Any) -> str:
    """EC2 query-protocol XML for ``value`` per botocore's ``shape`` (tags = location names)."""
    if shape.type_name == "structure":
        parts = []
        for key, item in value.items():
            member = shape.members[key]  # KeyError: a field the real API does not have
            tag = member.serialization.get("name", key[0].lower() + key[1:])
            parts.append(f"<{tag}>{_xml(member, item)}</{tag}>")
        return "".join(parts)
    if shape.type_name == "list":
        return "".join(f"<item>{_xml(shape.member, v)}</item>" for v in value)
    if shape.type_name == "boolean":
        return "true" if value else "false"
    if shape.type_name == "timestamp":
        return value.strftime("%Y-%m-%dT%H:%M:%S.000Z")
    return escape(str(value))


def describe_capacity_reservations(fake: AwsFake, params: dict[str, Any]):
    wanted = [v for k, v in params.items() if k.startswith("CapacityReservationId.")]
    with fake.lock:
        missing = [w for w in wanted if w not in fake.reservations]
        if missing:
            return error_response(
                "ec2",
                400,
                "InvalidCapacityReservationId.NotFound",
                f"The capacity reservation ID '{missing[0]}' does not exist",
            )
        chosen = (
            [fake.reservations[w] for w in wanted] if wanted else list(fake.reservations.values())
        )
    now = dt.datetime.now(dt.UTC)
    items = []
    for res in chosen:
        item = {
            "CapacityReservationId": res.id,
            "OwnerId": fake.account,
            "CapacityReservationArn": (
                f"arn:aws:ec2:{fake.region}:{fake.account}:capacity-reservation/{res.id}"
            ),
            "InstanceType": res.instance_type,
            "InstancePlatform": "Linux/UNIX",
            "AvailabilityZone": res.zone,
            "Tenancy": "default",
            "TotalInstanceCount": res.count,
            "AvailableInstanceCount": res.count if res.available is None else res.available,
            "EbsOptimized": True,
            "EphemeralStorage": False,
            "State": res.state,
            "StartDate": now,
            "EndDateType": "limited" if res.kind == "capacity-block" else "unlimited",
            "InstanceMatchCriteria": "targeted",
            "CreateDate": now,
            "Tags": [],
            "ReservationType": res.kind,
        }
        if res.kind == "capacity-block":
            item["EndDate"] = now + dt.timedelta(days=14)
        items.append(item)
    output = _ec2_model.operation_model("DescribeCapacityReservations").output_shape
    body = (
        f'<?xml version="1.0" encoding="UTF-8"?>\n<DescribeCapacityReservationsResponse '
        f'xmlns="{EC2_NS}"><requestId>{uuid.uuid4()}</requestId>'
        f"{_xml(output, {'CapacityReservations': items})}"
        "</DescribeCapacityReservationsResponse>"
    )
    return 200, {"Content-Type": "text/xml"}, body.encode()


# -- EKS access entries ---------------------------------------------------------------------


def _cluster_exists(fake: AwsFake, name: str) -> bool:
    auth = (
        "AWS4-HMAC-SHA256 Credential=testing/20260101/"
        f"{fake.region}/eks/aws4_request, SignedHeaders=host, Signature=0"
    )
    status, _, _ = fake.forward("GET", f"/clusters/{name}", {"Authorization": auth}, b"")
    return status == 200


def access_entries(fake: AwsFake, action: str, params: dict[str, Any]):
    cluster = params.get("name", "")
    principal = params.get("principalArn", "")
    key = (cluster, principal)
    if not _cluster_exists(fake, cluster):
        return error_response(
            "eks", 404, "ResourceNotFoundException", f"No cluster found for name: {cluster}."
        )
    now = dt.datetime.now(dt.UTC).isoformat()
    with fake.lock:
        entry = fake.access_entries.get(key)
        if action == "ListAccessEntries":
            arns = [p for (c, p) in fake.access_entries if c == cluster]
            return _json(200, {"accessEntries": arns})
        if action == "CreateAccessEntry":
            if entry is not None:
                return error_response(
                    "eks",
                    409,
                    "ResourceInUseException",
                    "The specified access entry resource is already in use on this cluster.",
                )
            entry = {
                "clusterName": cluster,
                "principalArn": principal,
                "kubernetesGroups": params.get("kubernetesGroups", []),
                "accessEntryArn": (
                    f"arn:aws:eks:{fake.region}:{fake.account}:access-entry/{cluster}/"
                    f"{uuid.uuid4()}"
                ),
                "createdAt": now,
                "modifiedAt": now,
                "tags": params.get("tags", {}),
                "username": params.get("username") or principal,
                "type": params.get("type", "STANDARD"),
            }
            fake.access_entries[key] = entry
            fake.access_policies[key] = []
            return _json(200, {"accessEntry": entry})
        if entry is None:
            return error_response(
                "eks",
                404,
                "ResourceNotFoundException",
                f"The specified principalArn could not be found. ({principal})",
            )
        if action == "DescribeAccessEntry":
            return _json(200, {"accessEntry": entry})
        if action == "DeleteAccessEntry":
            del fake.access_entries[key]
            fake.access_policies.pop(key, None)
            return _json(200, {})
        policies = fake.access_policies[key]
        if action == "ListAssociatedAccessPolicies":
            return _json(
                200,
                {
                    "clusterName": cluster,
                    "principalArn": principal,
                    "associatedAccessPolicies": policies,
                },
            )
        if action == "AssociateAccessPolicy":
            policy = {
                "policyArn": params["policyArn"],
                "accessScope": params["accessScope"],
                "associatedAt": now,
                "modifiedAt": now,
            }
            policies[:] = [p for p in policies if p["policyArn"] != params["policyArn"]]
            policies.append(policy)
            return _json(
                200,
                {
                    "clusterName": cluster,
                    "principalArn": principal,
                    "associatedAccessPolicy": policy,
                },
            )
        if action == "DisassociateAccessPolicy":
            policies[:] = [p for p in policies if p["policyArn"] != params.get("policyArn")]
            return _json(200, {})
    return None


ACCESS_ACTIONS = {
    "CreateAccessEntry",
    "DescribeAccessEntry",
    "ListAccessEntries",
    "DeleteAccessEntry",
    "AssociateAccessPolicy",
    "ListAssociatedAccessPolicies",
    "DisassociateAccessPolicy",
}


def answer(fake: AwsFake, service: str, action: str, params: dict[str, Any]):
    """The fake's own answer, or None to forward to moto."""
    if service == "ec2" and action == "DescribeCapacityReservations":
        return describe_capacity_reservations(fake, params)
    if service == "ec2" and action.endswith("Topology"):
        from tests.support import aws_fake_topology as topology

        if action in topology.ACTIONS:
            return topology.answer(fake, action, params)
    if service == "eks" and action in ACCESS_ACTIONS:
        return access_entries(fake, action, params)
    return None


# -- additions to moto's answers ------------------------------------------------------------


def _mount_name() -> str:
    return "".join(random.choices(string.ascii_lowercase + string.digits, k=8))


def _fsx_state(fake: AwsFake, fs: dict[str, Any], created: bool) -> None:
    fs_id = fs.get("FileSystemId")
    state = fake.filesystems.get(fs_id)
    if state is None:
        state = {
            "lifecycle": "CREATING" if created else "AVAILABLE",
            "describes": 0,
            "mount": _mount_name(),
        }
        fake.filesystems[fs_id] = state
    elif not created and state["lifecycle"] == "CREATING":
        state["describes"] += 1
        if state["describes"] > fake.fsx_describes_until_available:
            state["lifecycle"] = "AVAILABLE"
    fs["Lifecycle"] = state["lifecycle"]
    fs.setdefault("LustreConfiguration", {}).setdefault("MountName", state["mount"])
    fs.setdefault("VpcId", None)
    if fs["VpcId"] is None:
        fs.pop("VpcId")


def _template_instance_type(fake: AwsFake, ref: dict[str, Any]) -> str | None:
    """The InstanceType of a launch template version, read from moto."""
    query = {"Action": "DescribeLaunchTemplateVersions", "Version": "2016-11-15"}
    if ref.get("id"):
        query["LaunchTemplateId"] = ref["id"]
    else:
        query["LaunchTemplateName"] = ref.get("name", "")
    query["LaunchTemplateVersion.1"] = str(ref.get("version") or "$Default")
    auth = (
        "AWS4-HMAC-SHA256 Credential=testing/20260101/"
        f"{fake.region}/ec2/aws4_request, SignedHeaders=host, Signature=0"
    )
    status, _, body = fake.forward(
        "POST",
        "/",
        {"Authorization": auth, "Content-Type": "application/x-www-form-urlencoded"},
        urllib.parse.urlencode(query).encode(),
    )
    match = re.search(rb"<instanceType>([^<]+)</instanceType>", body)
    return match.group(1).decode() if status == 200 and match else None


def _pending_status(
    fake: AwsFake, resource: dict[str, Any], key: tuple[str, ...], created: bool, until: int
) -> None:
    """moto makes clusters and node groups ACTIVE at once; real EKS takes minutes. A resource
    created while ``until`` > 0 reports CREATING for its first ``until`` describes."""
    with fake.lock:
        if created:
            fake.pending[key] = until
        left = fake.pending.get(key, 0)
        if left > 0:
            resource["status"] = "CREATING"
            if not created:
                fake.pending[key] = left - 1


def patch(fake: AwsFake, service, action, params, status, headers, data):  # noqa: C901  one branch per faked AWS action
    if status != 200:
        return status, headers, data
    if service == "ec2" and action == "DescribeInstanceStatus":
        from tests.support.aws_fake_topology import patch_instance_status

        return status, headers, patch_instance_status(fake, data)
    if service == "ec2" and action == "TerminateInstances":
        ids = [v for k, v in sorted(params.items()) if k.startswith("InstanceId.")]
        for callback in list(fake.termination_callbacks):
            try:
                callback(ids)
            except Exception as exc:  # reported through callback_errors
                fake.callback_errors.append(exc)
        return status, headers, data
    if service == "fsx" and action in ("CreateFileSystem", "DescribeFileSystems"):
        body = json.loads(data)
        with fake.lock:
            if action == "CreateFileSystem":
                _fsx_state(fake, body["FileSystem"], created=True)
            else:
                for fs in body.get("FileSystems", []):
                    _fsx_state(fake, fs, created=False)
        headers["Content-Type"] = "application/x-amz-json-1.1"
        return status, headers, json.dumps(body).encode()
    if service == "eks" and action in ("CreateCluster", "DescribeCluster"):
        body = json.loads(data)
        cluster = body["cluster"]
        with fake.lock:
            if action == "CreateCluster":
                config = dict(params.get("accessConfig") or {})
                config.setdefault("authenticationMode", "CONFIG_MAP")
                config.pop("bootstrapClusterCreatorAdminPermissions", None)
                fake.cluster_access[cluster["name"]] = config
            config = fake.cluster_access.get(cluster["name"], {"authenticationMode": "CONFIG_MAP"})
        cluster["accessConfig"] = config
        if cluster["name"] in fake.cluster_endpoints:
            url, ca_data = fake.cluster_endpoints[cluster["name"]]
            cluster["endpoint"] = url
            cluster["certificateAuthority"] = {"data": ca_data} if ca_data else {}
        _pending_status(
            fake,
            cluster,
            ("cluster", cluster["name"]),
            action == "CreateCluster",
            fake.cluster_describes_until_active,
        )
        return status, headers, json.dumps(body).encode()
    if service == "eks" and action == "DescribeNodegroup":
        body = json.loads(data)
        group = body["nodegroup"]
        if (group["clusterName"], group["nodegroupName"]) in fake.types_from_template:
            group.pop("instanceTypes", None)
        _pending_status(
            fake,
            group,
            ("nodegroup", group["clusterName"], group["nodegroupName"]),
            False,
            fake.nodegroup_describes_until_active,
        )
        if group["nodegroupName"] in fake.nodegroup_status:
            group["status"], issues = fake.nodegroup_status[group["nodegroupName"]]
            group["health"] = {"issues": issues}
        return status, headers, json.dumps(body).encode()
    if service == "eks" and action == "CreateNodegroup":
        from tests.support.aws_fake import NodegroupCreated

        body = json.loads(data)
        group = body["nodegroup"]
        key = ("nodegroup", group["clusterName"], group["nodegroupName"])
        types = params.get("instanceTypes")
        if not types:
            # real EKS reports no instanceTypes when the launch template names the type; moto
            # reports its default t3.medium
            group.pop("instanceTypes", None)
            with fake.lock:
                fake.types_from_template.add(key[1:])
            template_type = _template_instance_type(fake, params.get("launchTemplate") or {})
            types = [template_type] if template_type else []
        _pending_status(fake, group, key, True, fake.nodegroup_describes_until_active)
        data = json.dumps(body).encode()
        event = NodegroupCreated(
            cluster=params.get("name", group.get("clusterName", "")),
            name=group["nodegroupName"],
            instance_types=tuple(types),
            desired_size=int((params.get("scalingConfig") or {}).get("desiredSize") or 0),
            labels=dict(params.get("labels") or {}),
            taints=tuple(params.get("taints") or ()),
            params=params,
        )
        for callback in list(fake.nodegroup_callbacks):
            try:
                callback(event)
            except Exception as exc:  # reported through callback_errors
                fake.callback_errors.append(exc)
    return status, headers, data
