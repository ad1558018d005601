"""The GCP fake's reservation blocks and sub-blocks (Compute Engine v1), as the GKE backend's
provider view reads and reports them:

- ``GET .../zones/Z/reservations/R/reservationBlocks`` (``ReservationBlocksListResponse``) and
  ``.../reservationBlocks/B`` (``ReservationBlocksGetResponse``: ``{"resource": block}``);
- ``GET .../reservationBlocks/B/reservationSubBlocks`` (``ReservationSubBlocksListResponse``)
  and ``.../reservationSubBlocks/S`` (``{"resource": sub-block}``);
- ``POST .../reservationSubBlocks/S/reportFaulty``: the body is checked against the discovery
  document's ``ReservationSubBlocksReportFaultyRequest`` (unknown field or enum value: 400),
  and what ``gcloud compute reservations sub-blocks report-subblock-as-faulty`` requires is
  required (``disruptionSchedule`` IMMEDIATE, the only value; a ``failureComponent``; at least
  one ``faultReasons`` entry with a ``behavior``). It answers a running zone operation of type
  ``reportFaulty`` targeting the sub-block (Google does not document the type's spelling; the
  backend matches any type containing "faulty"); when it completes the sub-block counts one
  more report (``fault_reports``).

Blocks are seeded by ``GcpFake.add_reservation(blocks=[...])``; sub-blocks by
``add_subblock``, which checks the seeded resource against the discovery document's
``ReservationSubBlock`` (the fake never serves a field the API lacks) and gives the block its
``physicalTopology`` and a ``healthInfo`` summed from its sub-blocks. A sub-block's
``physicalTopology.block``/``.subBlock`` are what the nodes' ``gce-topology-*`` labels carry;
its ``name`` is Compute Engine's and differs.
"""

from __future__ import annotations

from typing import Any

from tests.support import gcp_fake_schema as schema
from tests.support.gcp_fake_schema import bad_request
from tests.support.gcp_fake_state import COMPUTE, GcpState, Operation, not_found

REPORT_KIND = "reportFaulty"
_INTERNAL = ("faultReports",)


class ReservationBlocks:
    """Sub-blocks by (project, zone, reservation, block), and the reports received."""

    def __init__(self, state: GcpState) -> None:
        self.state = state
        self.subblocks: dict[tuple[str, str, str, str], list[dict[str, Any]]] = {}
        self.reports: list[dict[str, Any]] = []  # {project, zone, reservation, block, ...}

    # -- seeding ------------------------------------------------------------------------------
    def add_subblock(  # noqa: PLR0913  the fields of one faked sub-block
        self,
        project: str,
        zone: str,
        reservation: str,
        block: str,
        name: str,
        *,
        physical: tuple[str, str],
        hosts: int,
        degraded: int = 0,
        health_status: str | None = None,
        in_use: int = 0,
        cluster: str = "us-central1-cluster-fake",
    ) -> dict[str, Any]:
        """Seed sub-block ``name`` of a seeded block; ``physical`` is (block, sub-block) as the
        nodes' labels carry them; ``health_status`` defaults to DEGRADED when ``degraded``
        hosts, else HEALTHY (None in the API: pass ``"HEALTH_STATUS_UNSPECIFIED"``)."""
        block_obj = self._block(project, zone, reservation, block)
        link = f"{self._block_link(project, zone, reservation, block)}/reservationSubBlocks/{name}"
        sub = {
            "kind": "compute#reservationSubBlock",
            "id": str(abs(hash(link)) % 10**18),
            "name": name,
            "zone": f"{COMPUTE}/projects/{project}/zones/{zone}",
            "selfLink": link,
            "count": hosts,
            "inUseCount": in_use,
            "status": "READY",
            "physicalTopology": {"cluster": cluster, "block": physical[0], "subBlock": physical[1]},
            "healthInfo": {
                "healthStatus": health_status or ("DEGRADED" if degraded else "HEALTHY"),
                "healthyHostCount": hosts - degraded,
                "degradedHostCount": degraded,
            },
        }
        schema.compute.check(sub, "ReservationSubBlock")  # a field the API lacks: the test's bug
        self.subblocks.setdefault((project, zone, reservation, block), []).append(
            {**sub, "faultReports": 0}
        )
        block_obj["physicalTopology"] = {"cluster": cluster, "block": physical[0]}
        return sub

    # -- reads --------------------------------------------------------------------------------
    def list_blocks(self, project: str, zone: str, name: str, **_: Any) -> dict[str, Any]:
        self._reservation(project, zone, name)
        items = [
            self._block_view(project, zone, name, b) for b in self._blocks(project, zone, name)
        ]
        return {"kind": "compute#reservationBlock", "items": items}

    def get_block(self, project: str, zone: str, name: str, block: str, **_: Any):
        found = self._block(project, zone, name, block)
        return {"resource": self._block_view(project, zone, name, found)}

    def list_subblocks(
        self, project: str, zone: str, name: str, block: str, **_: Any
    ) -> dict[str, Any]:
        self._block(project, zone, name, block)
        items = [_public(s) for s in self.subblocks.get((project, zone, name, block), [])]
        return {"kind": "compute#reservationSubBlock", "items": items}

    def get_subblock(self, project: str, zone: str, name: str, block: str, sub: str, **_: Any):
        return {"resource": _public(self._subblock(project, zone, name, block, sub))}

    # -- reportFaulty -------------------------------------------------------------------------
    def report_faulty(
        self, project: str, zone: str, name: str, block: str, sub: str, body: Any, **_: Any
    ) -> Operation:
        found = self._subblock(project, zone, name, block, sub)
        checked = schema.compute.check(body, "ReservationSubBlocksReportFaultyRequest")
        if checked.get("disruptionSchedule") != "IMMEDIATE":
            raise bad_request(
                "Invalid value for field 'resource.disruptionSchedule': "
                f"'{checked.get('disruptionSchedule', '')}'. Only IMMEDIATE is supported."
            )
        if checked.get("failureComponent", "FAILURE_COMPONENT_UNSPECIFIED").endswith("UNSPECIFIED"):
            raise bad_request("Required field 'resource.failureComponent' not specified")
        reasons = checked.get("faultReasons") or []
        if not reasons or any(
            r.get("behavior", "FAULT_BEHAVIOR_UNSPECIFIED").endswith("UNSPECIFIED") for r in reasons
        ):
            raise bad_request("Required field 'resource.faultReasons[].behavior' not specified")
        self.reports.append(
            {
                "project": project,
                "zone": zone,
                "reservation": name,
                "block": block,
                "subblock": sub,
                "body": checked,
            }
        )
        return self.begin_report(project, zone, name, block, sub, found)

    def begin_report(
        self,
        project: str,
        zone: str,
        name: str,
        block: str,
        sub: str,
        found: dict[str, Any] | None = None,
    ) -> Operation:
        target = found or self._subblock(project, zone, name, block, sub)

        def finish() -> None:
            target["faultReports"] += 1

        return self.state.start("compute", {"zone": zone}, target["selfLink"], REPORT_KIND, finish)

    def fault_reports(self, project: str, zone: str, name: str, block: str, sub: str) -> int:
        return self._subblock(project, zone, name, block, sub)["faultReports"]

    # -- lookups ------------------------------------------------------------------------------
    def _reservation(self, project: str, zone: str, name: str) -> None:
        if (project, zone, name) not in self.state.reservations:
            raise not_found(f"The resource 'projects/{project}/zones/{zone}/reservations/{name}'")

    def _blocks(self, project: str, zone: str, name: str) -> list[dict[str, Any]]:
        return self.state.blocks.get((project, zone, name), [])

    def _block(self, project: str, zone: str, name: str, block: str) -> dict[str, Any]:
        self._reservation(project, zone, name)
        for found in self._blocks(project, zone, name):
            if found["name"] == block:
                return found
        raise not_found(f"The resource '{self._block_link(project, zone, name, block)}'")

    def _subblock(self, project: str, zone: str, name: str, block: str, sub: str):
        self._block(project, zone, name, block)
        for found in self.subblocks.get((project, zone, name, block), []):
            if found["name"] == sub:
                return found
        raise not_found(f"The resource 'reservationSubBlocks/{sub}' of block {block}")

    def _block_link(self, project: str, zone: str, name: str, block: str) -> str:
        zone_url = f"{COMPUTE}/projects/{project}/zones/{zone}"
        return f"{zone_url}/reservations/{name}/reservationBlocks/{block}"

    def _block_view(self, project: str, zone: str, name: str, block: dict[str, Any]):
        subs = self.subblocks.get((project, zone, name, block["name"]), [])
        out = {**block, "selfLink": self._block_link(project, zone, name, block["name"])}
        if subs:
            degraded = sum(1 for s in subs if s["healthInfo"]["healthStatus"] == "DEGRADED")
            out["reservationSubBlockCount"] = len(subs)
            out["healthInfo"] = {
                "healthStatus": "DEGRADED" if degraded else "HEALTHY",
                "healthySubBlockCount": len(subs) - degraded,
                "degradedSubBlockCount": degraded,
            }
        return out


def _public(sub: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in sub.items() if k not in _INTERNAL}
