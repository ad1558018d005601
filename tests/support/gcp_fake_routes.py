"""The GCP fake's URL table: which handler serves which REST path of container v1, compute v1
(VMs in ``gcp_fake_instances``, reservation blocks and sub-blocks in ``gcp_fake_blocks``) and
lustre v1, with each request body checked
(``gcp_fake_schema``) before the state sees it. ``checked`` keeps the last body as read (enum
names), for the fake's request log."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from tests.support import gcp_fake_schema as schema
from tests.support.gcp_fake_blocks import ReservationBlocks
from tests.support.gcp_fake_instances import ComputeInstances
from tests.support.gcp_fake_schema import ApiError
from tests.support.gcp_fake_state import GcpState, not_found

_P = r"projects/(?P<project>[^/]+)"
_LOC = rf"/v1/{_P}/locations/(?P<loc>[^/]+)"


class Router:
    def __init__(self, state: GcpState) -> None:
        self.state = state
        self.checked: Any = None
        self.vms = ComputeInstances(state)
        self.blocks = ReservationBlocks(state)
        self._routes = self._table()

    def route(self, method: str, path: str, query: dict[str, list[str]], body: Any) -> Any:
        for verb, pattern, handler in self._routes:
            match = pattern.fullmatch(path)
            if match and verb == method:
                return handler(body=body, query=query, **match.groupdict())
        if any(p.fullmatch(path) for _, p, _ in self._routes):
            raise ApiError(405, "METHOD_NOT_ALLOWED", f"{method} is not allowed on {path}")
        raise not_found(f"The URL {path}")

    def _table(self) -> list[tuple[str, re.Pattern[str], Callable[..., Any]]]:
        s = self.state
        c = rf"/compute/v1/{_P}"
        rb = rf"{c}/zones/(?P<zone>[^/]+)/reservations/(?P<name>[^/]+)/reservationBlocks"
        routes: list[tuple[str, str, Callable[..., Any]]] = [
            # compute
            (
                "GET",
                rf"{c}/global/networks/(?P<name>[^/]+)",
                lambda project, name, **_: self._get(
                    s.networks, (project, name), f"network {name}"
                ),
            ),
            (
                "POST",
                rf"{c}/global/networks",
                lambda project, body, **_: s.compute_operation(
                    s.insert_network(project, self.check(schema.compute, body, "Network")), project
                ),
            ),
            (
                "GET",
                rf"{c}/regions/(?P<region>[^/]+)/subnetworks/(?P<name>[^/]+)",
                lambda project, region, name, **_: self._get(
                    s.subnets, (project, region, name), f"subnetwork {name}"
                ),
            ),
            (
                "POST",
                rf"{c}/regions/(?P<region>[^/]+)/subnetworks",
                lambda project, region, body, **_: s.compute_operation(
                    s.insert_subnet(
                        project, region, self.check(schema.compute, body, "Subnetwork")
                    ),
                    project,
                ),
            ),
            (
                "GET",
                rf"{c}/zones/(?P<zone>[^/]+)/reservations/(?P<name>[^/]+)",
                lambda project, zone, name, **_: self._get(
                    s.reservations, (project, zone, name), f"reservation {name}"
                ),
            ),
            ("GET", rf"{rb}", self.blocks.list_blocks),
            ("GET", rf"{rb}/(?P<block>[^/]+)", self.blocks.get_block),
            ("GET", rf"{rb}/(?P<block>[^/]+)/reservationSubBlocks", self.blocks.list_subblocks),
            (
                "GET",
                rf"{rb}/(?P<block>[^/]+)/reservationSubBlocks/(?P<sub>[^/]+)",
                self.blocks.get_subblock,
            ),
            (
                "POST",
                rf"{rb}/(?P<block>[^/]+)/reservationSubBlocks/(?P<sub>[^/]+)/reportFaulty",
                self._report_subblock,
            ),
            ("GET", rf"{c}/zones/(?P<zone>[^/]+)/instances/(?P<name>[^/]+)", self.vms.get),
            (
                "POST",
                rf"{c}/zones/(?P<zone>[^/]+)/instances/(?P<name>[^/]+)/reportHostAsFaulty",
                self._report_host,
            ),
            (
                "POST",
                rf"{c}/zones/(?P<zone>[^/]+)/instances/(?P<name>[^/]+)/reset",
                lambda project, zone, name, body, **_: s.compute_operation(
                    self.vms.reset(project, zone, name, body), project
                ),
            ),
            ("GET", rf"{c}/zones/(?P<zone>[^/]+)/operations", self.vms.list_operations),
            (
                "GET",
                rf"{c}/(?:global|regions/[^/]+|zones/[^/]+)/operations/(?P<op>[^/]+)",
                lambda project, op, **_: s.compute_operation(self._tick(op, "compute"), project),
            ),
            # container
            (
                "POST",
                rf"{_LOC}/clusters",
                lambda project, loc, body, **_: s.container_operation(
                    s.create_cluster(
                        project, loc, self.check(schema.container, body, "CreateClusterRequest")
                    ),
                    project,
                ),
            ),
            (
                "GET",
                rf"{_LOC}/clusters/(?P<name>[^/]+)",
                lambda project, loc, name, **_: s.cluster_view(project, loc, name),
            ),
            (
                "POST",
                rf"{_LOC}/clusters/(?P<cluster>[^/]+)/nodePools",
                lambda project, loc, cluster, body, **_: s.container_operation(
                    s.create_node_pool(
                        project,
                        loc,
                        cluster,
                        self.check(schema.container, body, "CreateNodePoolRequest"),
                    ),
                    project,
                ),
            ),
            (
                "GET",
                rf"{_LOC}/clusters/(?P<cluster>[^/]+)/nodePools/(?P<name>[^/]+)",
                lambda project, loc, cluster, name, **_: s.node_pool_view(
                    project, loc, cluster, name
                ),
            ),
            (
                "DELETE",
                rf"{_LOC}/clusters/(?P<cluster>[^/]+)/nodePools/(?P<name>[^/]+)",
                lambda project, loc, cluster, name, **_: s.container_operation(
                    s.delete_node_pool(project, loc, cluster, name), project
                ),
            ),
            ("GET", rf"{_LOC}/operations/(?P<op>[^/]+)", self._get_operation),
            # lustre
            (
                "POST",
                rf"{_LOC}/instances",
                lambda project, loc, body, query, **_: s.lustre_operation(
                    s.create_instance(
                        project,
                        loc,
                        (query.get("instanceId") or [""])[0],
                        schema.check_lustre_instance(body),
                    )
                ),
            ),
            (
                "GET",
                rf"{_LOC}/instances/(?P<name>[^/]+)",
                lambda project, loc, name, **_: s.instance_view(project, loc, name),
            ),
        ]
        return [(verb, re.compile(pattern), fn) for verb, pattern, fn in routes]

    def check(self, validator: schema.DiscoveryValidator, body: Any, name: str) -> Any:
        self.checked = validator.check(body, name)
        return self.checked

    def _get(self, store: dict, key: tuple, what: str) -> dict[str, Any]:
        if key not in store:
            raise not_found(f"The resource '{what}'")
        return store[key]

    def _report_host(self, project: str, zone: str, name: str, body: Any, **_: Any) -> Any:
        op = self.vms.report_host_as_faulty(project, zone, name, body)
        self.checked = self.vms.reports[-1]["body"]
        return self.state.compute_operation(op, project)

    def _report_subblock(
        self, project: str, zone: str, name: str, block: str, sub: str, body: Any, **_: Any
    ) -> Any:
        op = self.blocks.report_faulty(project, zone, name, block, sub, body)
        self.checked = self.blocks.reports[-1]["body"]
        return self.state.compute_operation(op, project)

    def _tick(self, name: str, api: str) -> Any:
        op = self.state.operations.get(name)
        if op is None or op.api != api:
            raise not_found(f"The resource 'operation {name}'")
        self.state.tick(op)
        return op

    def _get_operation(self, project: str, loc: str, op: str, **_: Any) -> dict[str, Any]:
        lustre_name = f"projects/{project}/locations/{loc}/operations/{op}"
        if lustre_name in self.state.operations:
            return self.state.lustre_operation(self._tick(lustre_name, "lustre"))
        return self.state.container_operation(self._tick(op, "container"), project)
