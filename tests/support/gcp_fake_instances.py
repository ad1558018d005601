"""The GCP fake's Compute Engine VMs: ``instances.get``, ``instances.reportHostAsFaulty``,
``instances.reset`` and the zone operations list the GKE backend's repair and reboot read.

- ``GET .../zones/Z/instances/I``: a VM the test registered (``GcpFake.add_instance``), else 404.
- ``POST .../zones/Z/instances/I/reportHostAsFaulty``: the body is checked against the
  discovery document's ``InstancesReportHostAsFaultyRequest`` (unknown field or enum value:
  400), ``disruptionSchedule`` must be ``IMMEDIATE`` ("Required field, only allows IMMEDIATE"
  in the document) and the VM ``RUNNING`` (Google's documented precondition). It answers a
  running zone operation of type ``reportHostAsFaulty``; when the operation completes the VM
  counts one more host move (``host_moves``) and stays RUNNING.
- ``POST .../zones/Z/instances/I/reset``: the body must be empty (the API takes none); the VM
  must be ``RUNNING`` (else 400 "not ready", as Compute Engine answers for a VM it cannot
  reset). It answers a running zone operation of type ``reset``; the VM stays RUNNING (a reset
  keeps it so throughout) and counts one more reset (``resets``) when the operation completes.
- ``GET .../zones/Z/operations``: the zone's operations, with the one filter the backend
  sends (``status != DONE``); any other filter is a 400, so a changed filter shows up.

``begin_report`` and ``begin_reset`` start a report or a reset without a request, as one left
running by an earlier task.
"""

from __future__ import annotations

import re
from typing import Any

from tests.support import gcp_fake_schema as schema
from tests.support.gcp_fake_schema import ApiError, bad_request
from tests.support.gcp_fake_state import COMPUTE, GcpState, Operation, not_found

REPORT_KIND = "reportHostAsFaulty"
RESET_KIND = "reset"
_NOT_DONE = re.compile(r'\s*status\s*!=\s*"?DONE"?\s*')


class ComputeInstances:
    """VMs by (project, zone, name), and the host-fault reports received for them."""

    def __init__(self, state: GcpState) -> None:
        self.state = state
        self.vms: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.reports: list[dict[str, Any]] = []  # {project, zone, instance, body}
        self.reset_requests: list[dict[str, Any]] = []  # {project, zone, instance}

    def add(self, project: str, zone: str, name: str, status: str = "RUNNING", **fields: Any):
        link = f"{COMPUTE}/projects/{project}/zones/{zone}/instances/{name}"
        self.vms[(project, zone, name)] = {
            "kind": "compute#instance",
            "id": str(abs(hash(link)) % 10**18),
            "name": name,
            "status": status,
            "zone": f"{COMPUTE}/projects/{project}/zones/{zone}",
            "selfLink": link,
            "hostMoves": 0,
            "resets": 0,
            **fields,
        }

    def get(self, project: str, zone: str, name: str, **_: Any) -> dict[str, Any]:
        vm = self.vms.get((project, zone, name))
        if vm is None:
            raise not_found(f"The resource 'projects/{project}/zones/{zone}/instances/{name}'")
        return {k: v for k, v in vm.items() if k not in ("hostMoves", "resets")}

    def report_host_as_faulty(
        self, project: str, zone: str, name: str, body: Any, **_: Any
    ) -> Operation:
        vm = self.vms.get((project, zone, name))
        if vm is None:
            raise not_found(f"The resource 'projects/{project}/zones/{zone}/instances/{name}'")
        checked = schema.compute.check(body, "InstancesReportHostAsFaultyRequest")
        if checked.get("disruptionSchedule") != "IMMEDIATE":
            raise bad_request(
                "Invalid value for field 'resource.disruptionSchedule': "
                f"'{checked.get('disruptionSchedule', '')}'. Only IMMEDIATE is supported."
            )
        if vm["status"] != "RUNNING":
            raise ApiError(
                400,
                "FAILED_PRECONDITION",
                f"The instance '{name}' is {vm['status']}: only a RUNNING instance's host can "
                "be reported as faulty.",
            )
        self.reports.append({"project": project, "zone": zone, "instance": name, "body": checked})
        return self.begin_report(project, zone, name)

    def begin_report(self, project: str, zone: str, name: str) -> Operation:
        vm = self.vms[(project, zone, name)]

        def finish() -> None:
            vm["hostMoves"] += 1
            vm["status"] = "RUNNING"

        return self.state.start("compute", {"zone": zone}, vm["selfLink"], REPORT_KIND, finish)

    def reset(self, project: str, zone: str, name: str, body: Any, **_: Any) -> Operation:
        vm = self.vms.get((project, zone, name))
        if vm is None:
            raise not_found(f"The resource 'projects/{project}/zones/{zone}/instances/{name}'")
        if body:
            raise bad_request(
                f"Invalid JSON payload received. Unknown name {next(iter(body))!r}: the request "
                "body of instances.reset must be empty."
            )
        if vm["status"] != "RUNNING":
            raise ApiError(
                400,
                "FAILED_PRECONDITION",
                f"The resource 'projects/{project}/zones/{zone}/instances/{name}' is not ready "
                f"(status {vm['status']}): only a RUNNING instance can be reset.",
            )
        self.reset_requests.append({"project": project, "zone": zone, "instance": name})
        return self.begin_reset(project, zone, name)

    def begin_reset(self, project: str, zone: str, name: str) -> Operation:
        vm = self.vms[(project, zone, name)]

        def finish() -> None:
            vm["resets"] += 1

        return self.state.start("compute", {"zone": zone}, vm["selfLink"], RESET_KIND, finish)

    def list_operations(
        self, project: str, zone: str, query: dict[str, list[str]], **_: Any
    ) -> dict[str, Any]:
        flt = (query.get("filter") or [""])[0]
        if flt and not _NOT_DONE.fullmatch(flt):
            raise bad_request(f"Invalid list filter expression: {flt!r}")
        items = [
            self.state.compute_operation(op, project)
            for op in self.state.operations.values()
            if op.api == "compute"
            and op.scope.get("zone") == zone
            and f"/projects/{project}/" in op.target
            and not (flt and op.done)
        ]
        return {
            "kind": "compute#operationList",
            "id": f"projects/{project}/zones/{zone}/operations",
            "items": items,
        }
