"""The AWS fake's EC2 topology: what moto 5.2.5 lacks (``DescribeInstanceTopology`` and
``DescribeCapacityReservationTopology`` are NotImplemented there) answered from seeded network
nodes, and the host impairments moto cannot show.

- ``DescribeCapacityReservationTopology``: the seeded reservations (``AwsFake.
  add_capacity_reservation``) with the network nodes ``reserve(id, nodes)`` gave them (1 to 3,
  as AWS returns depending on the reservation type; none: absent, as for an unsupported
  type). Unknown id: 400 ``InvalidCapacityReservationId.NotFound``.
- ``DescribeInstanceTopology``: moto's instances (read from moto, so ids, types, zones and
  states are moto's) with the network nodes ``place(id, nodes)`` gave them, only while the
  instance is ``running`` (AWS: empty for another state or an unsupported type). Unknown id:
  moto's own ``InvalidInstanceID.NotFound``.
- Both keep the API's rules: ``MaxResults`` and explicit ids are exclusive
  (``InvalidParameterCombination``); at most 10 reservation ids / 100 instance ids; MaxResults
  1-10 / 1-100, pages with ``NextToken``. Filters, group names and ``DryRun`` are not served
  (400 naming them): a backend that starts sending them needs this stand-in extended.
- ``DescribeInstanceStatus`` goes to moto, whose system status is always ``ok``; an instance
  ``impair(id)`` named reads ``systemStatus`` impaired (reachability failed), as an instance on
  a failing host does; ``impair(id, check="instance")`` its ``instanceStatus``. moto 5.2.5
  reports no scheduled events: ``schedule(id, code, ...)`` adds one to the instance's
  ``eventsSet``, in the API's XML (the shape AWS documents, tests/data/events/ec2/).

Responses are EC2 query XML serialised from botocore's own output shapes (``_xml``): a field
the real API lacks cannot be sent.
"""

from __future__ import annotations

import uuid
import xml.etree.ElementTree as ET
from typing import TYPE_CHECKING, Any

from botocore.parsers import create_parser

from tests.support.aws_fake_handlers import EC2_NS, _ec2_model, _xml, error_response

if TYPE_CHECKING:
    from tests.support.aws_fake import AwsFake

ACTIONS = ("DescribeInstanceTopology", "DescribeCapacityReservationTopology")
_LIMITS = {  # action -> (ids param prefix, max ids, max MaxResults, default page)
    "DescribeCapacityReservationTopology": ("CapacityReservationId.", 10, 10, 10),
    "DescribeInstanceTopology": ("InstanceId.", 100, 100, 20),
}
_SERVED = {"Version", "MaxResults", "NextToken"}


class Ec2Topology:
    """Seeded network nodes (top layer first) and impaired instances."""

    def __init__(self) -> None:
        self.instances: dict[str, list[str]] = {}
        self.reservations: dict[str, list[str]] = {}
        self.impaired: set[str] = set()
        self.instance_impaired: set[str] = set()
        self.events: dict[str, list[dict[str, str]]] = {}

    def place(self, instance_id: str, nodes: list[str]) -> None:
        """The instance's network node set, top layer first (3, or 4 on some types)."""
        self.instances[instance_id] = list(nodes)

    def reserve(self, reservation_id: str, nodes: list[str]) -> None:
        """The capacity reservation's network node set (1 to 3 nodes, top layer first)."""
        self.reservations[reservation_id] = list(nodes)

    def impair(self, instance_id: str, check: str = "system") -> None:
        """The instance's system status check fails (its host is impaired), or with
        ``check="instance"`` its instance status check."""
        (self.impaired if check == "system" else self.instance_impaired).add(instance_id)

    def schedule(
        self,
        instance_id: str,
        code: str,
        description: str,
        not_before: str,
        not_after: str | None = None,
        event_id: str | None = None,
    ) -> None:
        """A scheduled event of the instance (times: ISO 8601, as the API writes them)."""
        event = {"instanceEventId": event_id or f"instance-event-{uuid.uuid4().hex[:17]}"}
        event.update(code=code, description=description, notBefore=not_before)
        if not_after is not None:
            event["notAfter"] = not_after
        self.events.setdefault(instance_id, []).append(event)

    def clear(self) -> None:
        self.instances.clear()
        self.reservations.clear()
        self.impaired.clear()
        self.instance_impaired.clear()
        self.events.clear()


def answer(fake: AwsFake, action: str, params: dict[str, Any]):
    prefix, max_ids, max_page, default_page = _LIMITS[action]
    ids = [v for k, v in sorted(params.items(), key=_order) if k.startswith(prefix)]
    unserved = sorted(k for k in params if k not in _SERVED and not k.startswith(prefix))
    if unserved:
        return _error("InvalidParameterValue", f"the fake does not serve {', '.join(unserved)}")
    if ids and "MaxResults" in params:
        return _error(
            "InvalidParameterCombination",
            f"The parameter MaxResults cannot be used with the parameter {prefix.rstrip('.')}s",
        )
    if len(ids) > max_ids:
        return _error("InvalidParameterValue", f"at most {max_ids} ids may be given")
    page = int(params.get("MaxResults") or default_page)
    if not 1 <= page <= max_page:
        return _error("InvalidParameterValue", f"MaxResults must be between 1 and {max_page}")
    if action == "DescribeCapacityReservationTopology":
        items = _reservations(fake, ids)
        key = "CapacityReservations"
    else:
        items = _instances(fake, ids)
        key = "Instances"
    if isinstance(items, tuple):  # an error answer
        return items
    start = int(params.get("NextToken") or 0)
    out: dict[str, Any] = {key: items if ids else items[start : start + page]}
    if not ids and start + page < len(items):
        out["NextToken"] = str(start + page)
    shape = _ec2_model.operation_model(action).output_shape
    body = (
        f'<?xml version="1.0" encoding="UTF-8"?>\n<{action}Response xmlns="{EC2_NS}">'
        f"<requestId>{uuid.uuid4()}</requestId>{_xml(shape, out)}</{action}Response>"
    )
    return 200, {"Content-Type": "text/xml"}, body.encode()


def _order(item: tuple[str, Any]) -> tuple[str, int]:
    name, _ = item
    head, _, tail = name.rpartition(".")
    return (head, int(tail)) if tail.isdigit() else (name, 0)


def _error(code: str, message: str):
    return error_response("ec2", 400, code, message)


def _reservations(fake: AwsFake, ids: list[str]):
    with fake.lock:
        missing = [i for i in ids if i not in fake.reservations]
        if missing:
            return error_response(
                "ec2",
                400,
                "InvalidCapacityReservationId.NotFound",
                f"The capacity reservation ID '{missing[0]}' does not exist",
            )
        chosen = [fake.reservations[i] for i in ids] if ids else list(fake.reservations.values())
        items = []
        for res in chosen:
            item = {
                "CapacityReservationId": res.id,
                "State": res.state,
                "InstanceType": res.instance_type,
                "AvailabilityZone": res.zone,
            }
            nodes = fake.topology.reservations.get(res.id)
            if nodes and res.state in ("active", "pending"):
                item["NetworkNodes"] = nodes
            items.append(item)
    return items


def _instances(fake: AwsFake, ids: list[str]):
    query = {"Action": "DescribeInstances", "Version": "2016-11-15"}
    query.update({f"InstanceId.{n}": i for n, i in enumerate(ids, 1)})
    status, headers, data = _moto(fake, query)
    if status != 200:
        return status, headers, data
    shape = _ec2_model.operation_model("DescribeInstances").output_shape
    parsed = create_parser("ec2").parse(
        {"body": data, "headers": headers, "status_code": status}, shape
    )
    items = []
    for reservation in parsed.get("Reservations", []):
        for inst in reservation.get("Instances", []):
            item = {
                "InstanceId": inst["InstanceId"],
                "InstanceType": inst.get("InstanceType", ""),
                "AvailabilityZone": (inst.get("Placement") or {}).get("AvailabilityZone", ""),
            }
            group = (inst.get("Placement") or {}).get("GroupName")
            if group:
                item["GroupName"] = group
            nodes = fake.topology.instances.get(inst["InstanceId"])
            if nodes and (inst.get("State") or {}).get("Name") == "running":
                item["NetworkNodes"] = nodes
            items.append(item)
    return sorted(items, key=lambda i: i["InstanceId"])


def _moto(fake: AwsFake, query: dict[str, str]):
    import urllib.parse

    auth = (
        "AWS4-HMAC-SHA256 Credential=testing/20260101/"
        f"{fake.region}/ec2/aws4_request, SignedHeaders=host, Signature=0"
    )
    headers = {"Authorization": auth, "Content-Type": "application/x-www-form-urlencoded"}
    return fake.forward("POST", "/", headers, urllib.parse.urlencode(query).encode())


def patch_instance_status(fake: AwsFake, data: bytes) -> bytes:
    """moto's DescribeInstanceStatus answer with the impaired instances' checks failed and
    the scheduled events added."""
    topo = fake.topology
    if not (topo.impaired or topo.instance_impaired or topo.events):
        return data
    root = ET.fromstring(data)
    ns = {"e": root.tag[1:].split("}", 1)[0]} if root.tag.startswith("{") else {"e": ""}
    ET.register_namespace("", ns["e"])
    for item in root.iterfind("e:instanceStatusSet/e:item", ns):
        instance = item.findtext("e:instanceId", namespaces=ns)
        for tag, impaired in (
            ("systemStatus", topo.impaired),
            ("instanceStatus", topo.instance_impaired),
        ):
            summary = item.find(f"e:{tag}", ns)
            if instance not in impaired or summary is None:
                continue
            summary.find("e:status", ns).text = "impaired"
            for detail in summary.iterfind("e:details/e:item", ns):
                detail.find("e:status", ns).text = "failed"
                since = ET.SubElement(detail, _tag(ns, "impairedSince"))
                since.text = "2026-12-07T09:55:00.000Z"
        if topo.events.get(instance):
            events = ET.SubElement(item, _tag(ns, "eventsSet"))
            for event in topo.events[instance]:
                entry = ET.SubElement(events, _tag(ns, "item"))
                for key, value in event.items():
                    ET.SubElement(entry, _tag(ns, key)).text = value
    return ET.tostring(root, xml_declaration=True, encoding="utf-8")


def _tag(ns: dict[str, str], name: str) -> str:
    return f"{{{ns['e']}}}{name}" if ns["e"] else name
