"""A local, strict fake of the Google REST endpoints the GKE backend uses.

One threaded HTTP server serves, over plain HTTP, the paths the generated REST clients call:

- container v1: ``/v1/projects/P/locations/L/clusters[/C[/nodePools[/NP]]]`` and
  ``/v1/projects/P/locations/L/operations/OP``;
- compute v1: ``/compute/v1/projects/P/global/networks[/N]``,
  ``.../regions/R/subnetworks[/S]``, ``.../zones/Z/reservations/R``, its
  ``reservationBlocks[/B[/reservationSubBlocks[/S[/reportFaulty]]]]`` (``gcp_fake_blocks``),
  ``.../zones/Z/instances/I[/reportHostAsFaulty|/reset]`` (``gcp_fake_instances``), the zone's
  operations list and the global / region / zone ``operations/OP``;
- lustre v1: ``/v1/projects/P/locations/L/instances[/I]`` and its operations.

Bodies are checked as strictly as Google does (``gcp_fake_schema``): an unknown field or a bad
enum value is a 400. Creates answer with running operations that complete after
``operation_polls`` reads (``gcp_fake_state``). Point the backend at it with
``GPUFLEET_GCP_ENDPOINT=fake.url`` (or ``GkeCloudBackend(..., endpoint=fake.url)``).

Test helpers: ``add_reservation``, ``add_subblock``, ``begin_subblock_report``,
``subblock_reports``/``subblock_fault_reports``, ``add_network``/``add_subnet``/``add_cluster``/
``add_node_pool``/``add_instance`` (seed existing resources), ``begin_host_report``,
``host_reports``/``host_moves``, ``begin_reset``/``reset_requests``/``resets``,
``set_cluster_endpoint``,
``on_node_pool_created``, ``inject_error``, ``inject_incompatible_operation``,
``slow_node_pool_delete``, ``requests`` (the log) with ``writes()`` and
``bodies()``.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.support.gcp_fake_routes import Router
from tests.support.gcp_fake_schema import ApiError, bad_request
from tests.support.gcp_fake_state import COMPUTE, GcpState


@dataclass(frozen=True)
class Request:
    """One request the fake received (``path`` without the query string). ``body`` is the
    body as the fake read it (container enums by name, after the schema check), ``raw`` as
    the client sent it (container enums as integers)."""

    method: str
    path: str
    query: dict[str, list[str]]
    body: dict[str, Any] | None
    raw: dict[str, Any] | None = None


@dataclass
class _Injection:
    status: int
    times: int
    method: str | None
    path_contains: str | None
    retry_after: str | None
    status_name: str | None = None
    message: str | None = None


class GcpFake:
    """The fake server. ``with GcpFake() as fake:`` starts and stops it; ``fake.url`` is
    ``http://127.0.0.1:PORT``. ``operation_polls``: reads before an operation completes."""

    def __init__(self, operation_polls: int = 2) -> None:
        self.state = GcpState(operation_polls=operation_polls)
        self.requests: list[Request] = []
        self._injections: list[_Injection] = []
        self._lock = threading.RLock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._router = Router(self.state)

    # -- lifecycle ----------------------------------------------------------------------------
    def start(self) -> GcpFake:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # a response goes out as two writes (headers, body): with Nagle's algorithm the
            # body waits for the client's delayed ACK, about 40 ms a request (the AWS fake's
            # front sets TCP_NODELAY for the same reason)
            disable_nagle_algorithm = True

            def _serve(self) -> None:
                fake._handle(self)

            do_GET = do_POST = do_DELETE = do_PATCH = do_PUT = _serve

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.05,), daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> GcpFake:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    @property
    def url(self) -> str:
        assert self._server is not None, "start the fake first"
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    # -- test helpers -------------------------------------------------------------------------
    def add_reservation(
        self,
        project: str,
        zone: str,
        name: str,
        machine_type: str,
        count: int,
        in_use: int = 0,
        blocks: list[str] | tuple[str, ...] | None = None,
    ) -> None:
        """Seed a reservation; ``blocks=None`` means the API lists no blocks for it."""
        with self._lock:
            self.state.reservations[(project, zone, name)] = {
                "kind": "compute#reservation",
                "name": name,
                "status": "READY",
                "zone": f"{COMPUTE}/projects/{project}/zones/{zone}",
                "selfLink": f"{COMPUTE}/projects/{project}/zones/{zone}/reservations/{name}",
                "specificReservationRequired": True,
                "specificReservation": {
                    "count": str(count),
                    "inUseCount": str(in_use),
                    "instanceProperties": {"machineType": machine_type},
                },
            }
            self.state.blocks[(project, zone, name)] = [
                {
                    "kind": "compute#reservationBlock",
                    "name": b,
                    "count": count,
                    "inUseCount": 0,
                    "status": "READY",
                }
                for b in blocks or ()
            ]

    def add_subblock(
        self, project: str, zone: str, reservation: str, block: str, name: str, **fields: Any
    ) -> dict[str, Any]:
        """Seed a sub-block of a seeded reservation block (``gcp_fake_blocks.add_subblock``:
        ``physical=(block, sub-block)`` as the nodes' labels carry them, ``hosts``,
        ``degraded``, ``health_status``); the sub-block as the API serves it."""
        with self._lock:
            return self._router.blocks.add_subblock(
                project, zone, reservation, block, name, **fields
            )

    def begin_subblock_report(
        self, project: str, zone: str, reservation: str, block: str, name: str
    ) -> str:
        """Start a faulty report of a seeded sub-block without a request (as one an earlier
        task left running); it stays RUNNING until its operation is polled. Its name."""
        with self._lock:
            return self._router.blocks.begin_report(project, zone, reservation, block, name).name

    def subblock_reports(self) -> list[dict[str, Any]]:
        """The accepted ``reservationSubBlocks.reportFaulty`` requests: ``{project, zone,
        reservation, block, subblock, body}``."""
        return list(self._router.blocks.reports)

    def subblock_fault_reports(
        self, project: str, zone: str, reservation: str, block: str, name: str
    ) -> int:
        """How many faulty reports of this sub-block completed."""
        return self._router.blocks.fault_reports(project, zone, reservation, block, name)

    def add_network(self, project: str, name: str, **fields: Any) -> None:
        """Seed an existing VPC (camelCase fields: ``mtu``, ``networkProfile`` ...)."""
        with self._lock:
            self.state.networks[(project, name)] = {
                "kind": "compute#network",
                "name": name,
                "selfLink": f"{COMPUTE}/projects/{project}/global/networks/{name}",
                **fields,
            }

    def add_subnet(self, project: str, region: str, name: str, network: str, cidr: str) -> None:
        with self._lock:
            self.state.subnets[(project, region, name)] = {
                "name": name,
                "ipCidrRange": cidr,
                "state": "READY",
                "network": f"{COMPUTE}/projects/{project}/global/networks/{network}",
                "region": f"{COMPUTE}/projects/{project}/regions/{region}",
            }

    def add_cluster(self, project: str, location: str, name: str, **fields: Any) -> None:
        """Seed an existing RUNNING cluster (camelCase fields, e.g. ``networkConfig``)."""
        link = f"https://container.googleapis.com/v1/projects/{project}/locations/{location}/clusters/{name}"
        with self._lock:
            self.state.clusters[(project, location, name)] = {
                "name": name,
                "status": "RUNNING",
                "location": location,
                "zone": location,
                "selfLink": link,
                "network": "default",
                "endpoint": self.state.cluster_endpoint,
                "currentMasterVersion": self.state.master_version,
                "masterAuth": {"clusterCaCertificate": self.state.cluster_ca},
                **fields,
            }

    def add_node_pool(
        self, project: str, location: str, cluster: str, name: str, **fields: Any
    ) -> None:
        with self._lock:
            self.state.pools[(project, location, cluster, name)] = {
                "name": name,
                "status": "RUNNING",
                **fields,
            }

    def add_instance(
        self, project: str, zone: str, name: str, status: str = "RUNNING", **fields: Any
    ) -> None:
        """Seed a Compute Engine VM (a GKE node's machine: ``gce://project/zone/name``)."""
        with self._lock:
            self._router.vms.add(project, zone, name, status, **fields)

    def begin_host_report(self, project: str, zone: str, name: str) -> str:
        """Start a host-fault report of a seeded VM without a request (as one an earlier
        task left running); it stays RUNNING until its operation is polled. Its name."""
        with self._lock:
            return self._router.vms.begin_report(project, zone, name).name

    def host_reports(self) -> list[dict[str, Any]]:
        """The accepted ``reportHostAsFaulty`` requests: ``{project, zone, instance, body}``."""
        return list(self._router.vms.reports)

    def host_moves(self, project: str, zone: str, name: str) -> int:
        """How many completed host-fault reports moved this VM to another host."""
        return self._router.vms.vms[(project, zone, name)]["hostMoves"]

    def begin_reset(self, project: str, zone: str, name: str) -> str:
        """Start a reset of a seeded VM without a request (as one an earlier task left
        running); it runs until its operation is polled. Its name."""
        with self._lock:
            return self._router.vms.begin_reset(project, zone, name).name

    def reset_requests(self) -> list[dict[str, Any]]:
        """The accepted ``instances.reset`` requests: ``{project, zone, instance}``."""
        return list(self._router.vms.reset_requests)

    def resets(self, project: str, zone: str, name: str) -> int:
        """How many completed resets this VM went through."""
        return self._router.vms.vms[(project, zone, name)]["resets"]

    def set_cluster_endpoint(self, endpoint: str, ca_data: str | None = None) -> None:
        """What clusters report as ``endpoint`` once created (e.g. a kmock ``http://...``
        URL); ``ca_data`` their CA (base64 PEM; empty string for none)."""
        with self._lock:
            self.state.cluster_endpoint = endpoint
            if ca_data is not None:
                self.state.cluster_ca = ca_data

    def on_node_pool_created(self, callback: Callable[[str, dict[str, Any]], None]) -> None:
        """Call ``callback(cluster_name, node_pool)`` when a node pool's create operation
        completes; ``node_pool`` is the stored camelCase NodePool (``name``,
        ``initialNodeCount``, ``locations``, ``config.labels``, ``config.taints`` ...).
        Exceptions land in ``fake.state.callback_errors``."""
        with self._lock:
            self.state.on_node_pool_created.append(callback)

    def inject_error(
        self,
        status: int = 503,
        times: int = 1,
        method: str | None = None,
        path_contains: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        """Answer the next ``times`` matching requests with ``status`` (and Retry-After)."""
        with self._lock:
            self._injections.append(
                _Injection(
                    status,
                    times,
                    method,
                    path_contains,
                    None if retry_after is None else str(int(retry_after)),
                )
            )

    def inject_incompatible_operation(
        self, times: int = 1, method: str | None = None, path_contains: str | None = None
    ) -> None:
        """Answer the next ``times`` matching requests as GKE does while another operation
        (an auto-upgrade, an auto-repair, another change) runs on the cluster: 400
        FAILED_PRECONDITION "Cluster is running incompatible operation ..."."""
        with self._lock:
            self._injections.append(
                _Injection(
                    400,
                    times,
                    method,
                    path_contains,
                    None,
                    "FAILED_PRECONDITION",
                    "Cluster is running incompatible operation operation-1718-auto-upgrade.",
                )
            )

    def slow_node_pool_delete(self, name: str, polls: int, error: str | None = None) -> None:
        """The next delete of node pool ``name`` stays RUNNING for ``polls`` reads (of the
        operation or the pool), then ends DONE; with ``error``, DONE carrying that error and
        the pool left in place (status ERROR), as a failed GKE delete."""
        with self._lock:
            self.state.delete_plans[name] = (polls, error)

    def writes(self) -> list[Request]:
        """Every request that was not a GET (creates, inserts, updates, deletes)."""
        return [r for r in self.requests if r.method != "GET"]

    def bodies(self, method: str, path_pattern: str) -> list[dict[str, Any]]:
        """Bodies of requests whose path matches the regular expression ``path_pattern``."""
        return [
            r.body or {}
            for r in self.requests
            if r.method == method and re.search(path_pattern, r.path)
        ]

    def clear_log(self) -> None:
        with self._lock:
            self.requests.clear()

    # -- HTTP ---------------------------------------------------------------------------------
    def _handle(self, h: BaseHTTPRequestHandler) -> None:
        parts = urlsplit(h.path)
        length = int(h.headers.get("Content-Length") or 0)
        raw = h.rfile.read(length) if length else b""
        status, payload, headers = 200, {}, {}
        with self._lock:
            self._router.checked = None
            body = None
            try:
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    raise bad_request("Invalid JSON payload received.") from None
                self._maybe_inject(h.command, parts.path)
                payload = self._route(h.command, parts.path, parse_qs(parts.query), body)
            except ApiError as err:
                status, payload, headers = err.code, err.body(), err.headers
            finally:
                seen = self._router.checked if self._router.checked is not None else body
                self.requests.append(
                    Request(h.command, parts.path, parse_qs(parts.query), seen, body)
                )
        out = json.dumps(payload).encode()
        h.send_response(status)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(out)))
        for key, value in headers.items():
            h.send_header(key, value)
        h.end_headers()
        h.wfile.write(out)

    def _maybe_inject(self, method: str, path: str) -> None:
        for inj in self._injections:
            if inj.times <= 0 or (inj.method and inj.method != method):
                continue
            if inj.path_contains and inj.path_contains not in path:
                continue
            inj.times -= 1
            statuses = {429: "RESOURCE_EXHAUSTED", 503: "UNAVAILABLE", 500: "INTERNAL"}
            headers = {"Retry-After": inj.retry_after} if inj.retry_after else {}
            raise ApiError(
                inj.status,
                inj.status_name or statuses.get(inj.status, "UNKNOWN"),
                inj.message or "Injected error: the service is currently unavailable.",
                headers,
            )

    def _route(self, method: str, path: str, query: dict[str, list[str]], body: Any) -> Any:
        return self._router.route(method, path, query, body)
