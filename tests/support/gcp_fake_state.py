"""The GCP fake's state: networks, subnets, reservations, clusters, node pools, Lustre
instances and their long-running operations, with the rules the real APIs enforce on them.

Each create answers with a running operation; the operation (and the resource's status)
completes after ``operation_polls`` reads of the operation or of the resource, as a real one
completes while a caller polls. Node pools need a RUNNING cluster, an existing reservation
(and block) in their zone with the pool's machine type, and existing additional networks and
subnets; Lustre and clusters need their VPC (``default`` always exists).
"""

from __future__ import annotations

import base64
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tests.support.gcp_fake_schema import ApiError, bad_request

COMPUTE = "https://www.googleapis.com/compute/v1"


def not_found(what: str) -> ApiError:
    return ApiError(404, "NOT_FOUND", f"{what} was not found.")


def conflict(what: str) -> ApiError:
    return ApiError(409, "ALREADY_EXISTS", f"{what} already exists.")


@dataclass
class Operation:
    name: str
    api: str  # container | compute | lustre
    scope: dict[str, str]  # compute: zone/region; container: zone/location; lustre: parent
    target: str
    kind: str
    finish: Callable[[], None]
    polls: int = 0
    done: bool = False
    polls_needed: int | None = None  # None: the state's operation_polls
    error: str | None = None  # ends DONE with this error (google.rpc.Status message)


@dataclass
class GcpState:
    operation_polls: int = 2
    cluster_endpoint: str = "34.118.0.10"
    cluster_ca: str = base64.b64encode(b"-----BEGIN CERTIFICATE-----fake").decode()
    master_version: str = "1.33.5-gke.1000"
    on_node_pool_created: list[Callable[[str, dict[str, Any]], None]] = field(default_factory=list)
    callback_errors: list[BaseException] = field(default_factory=list)
    networks: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    subnets: dict[tuple[str, str, str], dict[str, Any]] = field(default_factory=dict)
    reservations: dict[tuple[str, str, str], dict[str, Any]] = field(default_factory=dict)
    blocks: dict[tuple[str, str, str], list[dict[str, Any]]] = field(default_factory=dict)
    clusters: dict[tuple[str, str, str], dict[str, Any]] = field(default_factory=dict)
    pools: dict[tuple[str, str, str, str], dict[str, Any]] = field(default_factory=dict)
    instances: dict[tuple[str, str, str], dict[str, Any]] = field(default_factory=dict)
    operations: dict[str, Operation] = field(default_factory=dict)
    pending: dict[str, Operation] = field(default_factory=dict)  # target -> running operation
    # node pool name -> (polls before its next delete ends, the error it ends with or None)
    delete_plans: dict[str, tuple[int, str | None]] = field(default_factory=dict)
    _ids: Any = field(default_factory=lambda: itertools.count(1000))

    # -- operations ---------------------------------------------------------------------------
    def start(self, api: str, scope: dict[str, str], target: str, kind: str, finish) -> Operation:
        op = Operation(f"operation-{api[:2]}-{next(self._ids)}", api, scope, target, kind, finish)
        self.operations[op.name] = op
        self.pending[target] = op
        if self.operation_polls <= 0:
            self._complete(op)
        return op

    def tick(self, op: Operation) -> None:
        if op.done:
            return
        op.polls += 1
        needed = self.operation_polls if op.polls_needed is None else op.polls_needed
        if op.polls >= needed:
            self._complete(op)

    def tick_target(self, target: str) -> None:
        if target in self.pending:
            self.tick(self.pending[target])

    def _complete(self, op: Operation) -> None:
        op.done = True
        self.pending.pop(op.target, None)
        op.finish()

    # -- compute ------------------------------------------------------------------------------
    def network_exists(self, project: str, name: str) -> bool:
        return name == "default" or (project, name) in self.networks

    def insert_network(self, project: str, body: dict[str, Any]) -> Operation:
        name = body.get("name") or ""
        if not name:
            raise bad_request("Required field 'resource.name' not specified")
        if (project, name) in self.networks:
            raise conflict(f"The resource 'projects/{project}/global/networks/{name}'")
        if body.get("autoCreateSubnetworks", True) is not False and "IPv4Range" not in body:
            pass  # auto mode is legal; gpufleet always sends custom mode
        link = f"{COMPUTE}/projects/{project}/global/networks/{name}"
        stored = {
            "kind": "compute#network",
            "id": str(next(self._ids)),
            "selfLink": link,
            "mtu": 1460,
            **body,
        }
        if "networkProfile" in body:
            stored["networkProfile"] = f"{COMPUTE}/{body['networkProfile']}"
        self.networks[(project, name)] = stored
        return self.start("compute", {}, link, "insert", lambda: None)

    def insert_subnet(self, project: str, region: str, body: dict[str, Any]) -> Operation:
        name = body.get("name") or ""
        if not name or not body.get("ipCidrRange") or not body.get("network"):
            raise bad_request("Required fields 'name', 'ipCidrRange' and 'network' must be set")
        network = body["network"].rstrip("/").rsplit("/", 1)[-1]
        if not self.network_exists(project, network):
            raise bad_request(
                f"The resource 'projects/{project}/global/networks/{network}' "
                "is not ready or does not exist"
            )
        if (project, region, name) in self.subnets:
            raise conflict(f"The resource 'projects/{project}/regions/{region}/subnetworks/{name}'")
        link = f"{COMPUTE}/projects/{project}/regions/{region}/subnetworks/{name}"
        self.subnets[(project, region, name)] = {
            "kind": "compute#subnetwork",
            "selfLink": link,
            **body,
            "network": f"{COMPUTE}/projects/{project}/global/networks/{network}",
            "region": f"{COMPUTE}/projects/{project}/regions/{region}",
            "state": "READY",
        }
        return self.start("compute", {"region": region}, link, "insert", lambda: None)

    def compute_operation(self, op: Operation, project: str) -> dict[str, Any]:
        out = {
            "kind": "compute#operation",
            "name": op.name,
            "id": op.name.rsplit("-", 1)[-1],
            "operationType": op.kind,
            "targetLink": op.target,
            "status": "DONE" if op.done else "RUNNING",
            "progress": 100 if op.done else 50,
        }
        if "zone" in op.scope:
            out["zone"] = f"{COMPUTE}/projects/{project}/zones/{op.scope['zone']}"
        elif "region" in op.scope:
            out["region"] = f"{COMPUTE}/projects/{project}/regions/{op.scope['region']}"
        out["selfLink"] = f"{COMPUTE}/projects/{project}/global/operations/{op.name}"
        return out

    # -- container ----------------------------------------------------------------------------
    def create_cluster(self, project: str, location: str, body: dict[str, Any]) -> Operation:
        cluster = dict(body.get("cluster") or {})
        name = cluster.get("name") or ""
        if not name:
            raise bad_request("Cluster.name must be set.")
        key = (project, location, name)
        if key in self.clusters:
            raise conflict(f"Cluster {name!r}")
        if not self.network_exists(project, cluster.get("network") or "default"):
            raise bad_request(f"Network {cluster.get('network')!r} does not exist.")
        if cluster.get("initialNodeCount") and cluster.get("nodePools"):
            raise bad_request("Cluster.initial_node_count and Cluster.node_pools are exclusive")
        link = f"https://container.googleapis.com/v1/projects/{project}/locations/{location}/clusters/{name}"
        pools = cluster.pop("nodePools", [])
        cluster.update(
            status="PROVISIONING",
            selfLink=link,
            location=location,
            zone=location,
            network=cluster.get("network") or "default",
        )
        self.clusters[key] = cluster
        for pool in pools:
            self.pools[(project, location, name, pool["name"])] = {**pool, "status": "PROVISIONING"}

        def finish() -> None:
            version = self.master_version
            wanted = cluster.get("initialClusterVersion")
            if wanted:
                version = wanted if wanted.count(".") >= 2 else f"{wanted}.5-gke.1000"
            cluster.update(
                status="RUNNING",
                endpoint=self.cluster_endpoint,
                currentMasterVersion=version,
                masterAuth={"clusterCaCertificate": self.cluster_ca},
            )
            for pool in pools:
                self.pools[(project, location, name, pool["name"])]["status"] = "RUNNING"

        return self.start("container", {"location": location}, link, "CREATE_CLUSTER", finish)

    def cluster_view(self, project: str, location: str, name: str) -> dict[str, Any]:
        cluster = self.clusters.get((project, location, name))
        if cluster is None:
            raise not_found(f"Cluster {name!r}")
        self.tick_target(cluster["selfLink"])
        pools = [
            p
            for (pr, lo, cl, _), p in self.pools.items()
            if (pr, lo, cl) == (project, location, name)
        ]
        return {**cluster, "nodePools": pools}

    def create_node_pool(
        self, project: str, location: str, cluster_name: str, body: dict[str, Any]
    ) -> Operation:
        cluster = self.clusters.get((project, location, cluster_name))
        if cluster is None:
            raise not_found(f"Cluster {cluster_name!r}")
        if cluster["status"] != "RUNNING":
            raise ApiError(
                400,
                "FAILED_PRECONDITION",
                f"Cluster {cluster_name!r} is {cluster['status']}: operations on node "
                "pools need a RUNNING cluster.",
            )
        pool = dict(body.get("nodePool") or {})
        name = pool.get("name") or ""
        if not name:
            raise bad_request("NodePool.name must be set.")
        key = (project, location, cluster_name, name)
        if key in self.pools:
            raise conflict(f"Node pool {name!r}")
        self._check_pool(project, location, pool)
        link = f"{cluster['selfLink']}/nodePools/{name}"
        pool.update(status="PROVISIONING", selfLink=link)
        self.pools[key] = pool

        def finish() -> None:
            pool["status"] = "RUNNING"
            self._consume(project, location, pool)
            for callback in list(self.on_node_pool_created):
                try:
                    callback(cluster_name, pool)
                except Exception as exc:  # noqa: BLE001 - surfaced through callback_errors
                    self.callback_errors.append(exc)

        return self.start("container", {"location": location}, link, "CREATE_NODE_POOL", finish)

    def _check_pool(self, project: str, location: str, pool: dict[str, Any]) -> None:
        config = pool.get("config") or {}
        zone = (pool.get("locations") or [location])[0]
        affinity = config.get("reservationAffinity") or {}
        if affinity.get("consumeReservationType") == "SPECIFIC_RESERVATION":
            if affinity.get("key") != "compute.googleapis.com/reservation-name":
                raise bad_request(
                    "reservationAffinity.key must be compute.googleapis.com/reservation-name"
                )
            values = affinity.get("values") or []
            if len(values) != 1:
                raise bad_request("SPECIFIC_RESERVATION takes exactly one reservation value")
            res_name, _, block = values[0].partition("/reservationBlocks/")
            res = self.reservations.get((project, zone, res_name))
            if res is None:
                raise bad_request(f"Reservation {res_name!r} not found in zone {zone}.")
            if block and block not in {
                b["name"] for b in self.blocks.get((project, zone, res_name), [])
            }:
                raise bad_request(f"Reservation block {block!r} not found in {res_name!r}.")
            reserved = res["specificReservation"]["instanceProperties"]["machineType"]
            if config.get("machineType") != reserved:
                raise bad_request(
                    f"Machine type {config.get('machineType')!r} does not match "
                    f"reservation {res_name!r} ({reserved})."
                )
        for extra in (pool.get("networkConfig") or {}).get("additionalNodeNetworkConfigs", []):
            region = "-".join(zone.split("-")[:2])
            if not self.network_exists(project, extra.get("network", "")):
                raise bad_request(f"Network {extra.get('network')!r} does not exist.")
            if (project, region, extra.get("subnetwork", "")) not in self.subnets:
                raise bad_request(
                    f"Subnetwork {extra.get('subnetwork')!r} does not exist in {region}."
                )

    def _consume(self, project: str, location: str, pool: dict[str, Any]) -> None:
        values = ((pool.get("config") or {}).get("reservationAffinity") or {}).get("values") or []
        zone = (pool.get("locations") or [location])[0]
        for value in values:
            res = self.reservations.get((project, zone, value.split("/reservationBlocks/")[0]))
            if res is not None:
                spec = res["specificReservation"]
                spec["inUseCount"] = str(
                    int(spec["inUseCount"]) + int(pool.get("initialNodeCount", 0))
                )

    def node_pool_view(
        self, project: str, location: str, cluster: str, name: str
    ) -> dict[str, Any]:
        pool = self.pools.get((project, location, cluster, name))
        if pool is None:
            raise not_found(f"Node pool {name!r}")
        if "selfLink" in pool:
            self.tick_target(pool["selfLink"])
        return pool

    def delete_node_pool(self, project: str, location: str, cluster: str, name: str) -> Operation:
        key = (project, location, cluster, name)
        pool = self.node_pool_view(project, location, cluster, name)
        if pool["status"] == "STOPPING":  # as GKE: one operation per pool at a time
            busy = self.pending.get(pool.get("selfLink", ""))
            message = f"Cluster is running incompatible operation {busy and busy.name}."
            raise ApiError(400, "FAILED_PRECONDITION", message)
        pool["status"] = "STOPPING"
        link = pool.get("selfLink", name)
        polls, error = self.delete_plans.pop(name, (None, None))

        def finish() -> None:
            if error is None:
                self.pools.pop(key, None)
            else:
                pool["status"] = "ERROR"

        op = self.start("container", {"location": location}, link, "DELETE_NODE_POOL", finish)
        op.polls_needed, op.error = polls, error  # finish() reads its own error
        return op

    def container_operation(self, op: Operation, project: str) -> dict[str, Any]:
        location = op.scope["location"]
        out: dict[str, Any] = {}
        if op.done and op.error:
            out = {"error": {"code": 9, "message": op.error}, "statusMessage": op.error}
        return out | {
            "name": op.name,
            "operationType": op.kind,
            "zone": location,
            "location": location,
            "status": "DONE" if op.done else "RUNNING",
            "targetLink": op.target,
            "selfLink": f"https://container.googleapis.com/v1/projects/{project}/locations/"
            f"{location}/operations/{op.name}",
        }

    # -- lustre -------------------------------------------------------------------------------
    def create_instance(
        self, project: str, location: str, instance_id: str, body: dict[str, Any]
    ) -> Operation:
        if not instance_id:
            raise bad_request("instanceId must be set")
        key = (project, location, instance_id)
        if key in self.instances:
            raise conflict(f"Instance {instance_id!r}")
        network = body["network"].rsplit("/", 1)[-1]
        if not self.network_exists(project, network):
            raise bad_request(f"Network {body['network']!r} does not exist.")
        name = f"projects/{project}/locations/{location}/instances/{instance_id}"
        instance = {**body, "name": name, "state": "CREATING"}
        self.instances[key] = instance
        ip = f"172.16.0.{len(self.instances) + 1}"

        def finish() -> None:
            instance.update(state="ACTIVE", mountPoint=f"{ip}@tcp:/{body['filesystem']}")

        op = self.start("lustre", {"location": location}, name, "create", finish)
        op.name = f"projects/{project}/locations/{location}/operations/{op.name}"
        self.operations[op.name] = op
        return op

    def instance_view(self, project: str, location: str, instance_id: str) -> dict[str, Any]:
        instance = self.instances.get((project, location, instance_id))
        if instance is None:
            raise not_found(
                f"Resource 'projects/{project}/locations/{location}/instances/{instance_id}'"
            )
        self.tick_target(instance["name"])
        return instance

    def lustre_operation(self, op: Operation) -> dict[str, Any]:
        out: dict[str, Any] = {"name": op.name, "done": op.done}
        if op.done:
            out["response"] = {
                "@type": "type.googleapis.com/google.cloud.lustre.v1.Instance",
                **{k: v for k, v in self.instances_by_name(op.target).items()},
            }
        return out

    def instances_by_name(self, name: str) -> dict[str, Any]:
        for instance in self.instances.values():
            if instance["name"] == name:
                return instance
        return {}
