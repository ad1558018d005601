"""One local AWS endpoint for boto3: moto in server mode, fronted by a small HTTP fake that
answers what moto 5.2.5 lacks and records every request.

boto3 reaches ``AwsFake.url`` through the standard ``AWS_ENDPOINT_URL`` (``environ()``); the front:

- answers EC2 ``DescribeCapacityReservations`` and the topology calls (moto: NotImplemented,
  500) from seeded reservations and ``topology`` (``aws_fake_topology``), as EC2 XML;
- keeps EKS access entries and their access policies (moto: 404), and adds the
  ``accessConfig`` of CreateCluster to moto's cluster responses (moto drops it);
- reports new clusters and node groups CREATING for their first
  ``cluster_describes_until_active`` / ``nodegroup_describes_until_active`` describes (moto:
  ACTIVE at once; both default to 0);
- adds ``Lifecycle`` (CREATING, then AVAILABLE after ``fsx_describes_until_available``
  describes, or ``set_filesystem_lifecycle``) and ``LustreConfiguration.MountName`` to moto's
  FSx responses;
- calls ``on_nodegroup_created`` callbacks when a CreateNodegroup succeeded (the integration
  test registers the group's nodes in its Kubernetes emulator), and ``on_instances_terminated``
  callbacks when a TerminateInstances succeeded (``aws_fake_nodegroup`` replaces them);
- injects errors (``fail``/``throttle``) in each protocol's real error shape; logs
  ``(service, action, params)`` of every request (``requests``, ``actions()``, ``writes()``).

Everything else is forwarded to moto unchanged. Handlers live in ``aws_fake_handlers``.
"""

from __future__ import annotations

import http.client
import json
import re
import socket
import threading
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import botocore.session
from moto.server import ThreadedMotoServer

from tests.support import aws_fake_handlers as handlers
from tests.support.aws_fake_topology import Ec2Topology

READ_PREFIXES = ("Describe", "List", "Get")
_CREDENTIAL = re.compile(r"Credential=[^/]+/\d{8}/([^/]+)/([^/]+)/aws4_request")


@dataclass(frozen=True)
class Request:
    """One request the fake received: service (``ec2``), action (``CreateVpc``) and params
    (query params flattened ``Key.1=...``, or the JSON body merged with path parameters)."""

    service: str
    action: str
    params: dict[str, Any]
    injected: bool = False

    @property
    def write(self) -> bool:
        return not self.action.startswith(READ_PREFIXES)


@dataclass
class CapacityReservation:
    """A seeded EC2 capacity reservation (``kind``: ``default`` or ``capacity-block``)."""

    id: str
    instance_type: str
    count: int
    zone: str
    kind: str = "capacity-block"
    available: int | None = None
    state: str = "active"


@dataclass
class Injection:
    service: str
    action: str
    status: int
    code: str
    times: int
    retry_after: str | None = None


@dataclass(frozen=True)
class NodegroupCreated:
    """What a successful CreateNodegroup asked for (passed to ``on_nodegroup_created``)."""

    cluster: str
    name: str
    instance_types: tuple[str, ...]
    desired_size: int
    labels: dict[str, str]
    taints: tuple[dict[str, str], ...]
    params: dict[str, Any] = field(default_factory=dict)


@cache
def _rest_routes(service: str) -> list[tuple[str, re.Pattern[str], str]]:
    """(method, path regex, operation) for a rest-json service, from botocore's model."""
    model = botocore.session.get_session().get_service_model(service)
    routes = []
    for op in model.operation_names:
        http_ = model.operation_model(op).http
        uri = http_["requestUri"].split("?")[0]
        pattern = re.sub(r"\{([^}+]+)\+\}", r"(?P<\1>.+)", uri)
        pattern = re.sub(r"\{([^}]+)\}", r"(?P<\1>[^/]+)", pattern)
        routes.append((http_["method"], re.compile(f"^{pattern}$"), op))
    # literal paths before templated ones, longer first
    routes.sort(key=lambda r: (r[1].pattern.count("(?P"), -len(r[1].pattern)))
    return routes


@cache
def protocol(service: str) -> str:
    return botocore.session.get_session().get_service_model(service).metadata["protocol"]


def _moto_reads_partitions_once() -> None:
    """moto's EKS checks a role ARN's partition against a new boto3 ``Session()`` for every
    CreateCluster and CreateNodegroup, which parses botocore's endpoints file (a megabyte of
    JSON) each time; the rest of moto asks the one session it caches
    (``AccountSpecificBackend.get_session``). Its EKS asks that one too."""
    import moto.eks.utils
    from moto.core.base_backend import AccountSpecificBackend

    moto.eks.utils.Session = AccountSpecificBackend.get_session


class AwsFake:
    """moto + the front. ``start()``/``stop()`` or use as a context manager."""

    def __init__(self, account: str = "123456789012", region: str = "us-east-1") -> None:
        self.account = account
        self.region = region
        self.requests: list[Request] = []
        self.reservations: dict[str, CapacityReservation] = {}
        self.topology = Ec2Topology()  # network nodes and impaired hosts (aws_fake_topology)
        self.access_entries: dict[tuple[str, str], dict[str, Any]] = {}
        self.access_policies: dict[tuple[str, str], list[dict[str, Any]]] = {}
        self.cluster_access: dict[str, dict[str, Any]] = {}
        self.filesystems: dict[str, dict[str, Any]] = {}  # fs id -> {lifecycle, describes, mount}
        self.fsx_describes_until_available = 1
        # moto's clusters and node groups are ACTIVE at once; > 0 makes new ones report
        # CREATING for that many describes, as real EKS does for minutes
        self.cluster_describes_until_active = 0
        self.nodegroup_describes_until_active = 0
        self.pending: dict[tuple[str, ...], int] = {}
        self.cluster_endpoints: dict[str, tuple[str, str | None]] = {}
        self.nodegroup_status: dict[str, tuple[str, list[dict[str, Any]]]] = {}
        self.types_from_template: set[tuple[str, str]] = set()  # (cluster, node group)
        self.injections: list[Injection] = []
        self.nodegroup_callbacks: list[Callable[[NodegroupCreated], None]] = []
        self.termination_callbacks: list[Callable[[list[str]], None]] = []
        self.callback_errors: list[BaseException] = []
        self.lock = threading.RLock()
        self._moto: ThreadedMotoServer | None = None
        self._server: ThreadingHTTPServer | None = None
        self.moto_port = 0

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> AwsFake:
        _moto_reads_partitions_once()
        self._moto = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self._moto.start()
        self.moto_port = self._moto.get_host_and_port()[1]
        fake = self

        class Handler(_FrontHandler):
            owner = fake

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server:
            self._server.shutdown()
            self._server.server_close()
        if self._moto:
            self._moto.stop()

    def __enter__(self) -> AwsFake:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        assert self._server is not None, "start() the fake first"
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def environ(self) -> dict[str, str]:
        """Environment for boto3: every service at the fake, test credentials, no profile."""
        return {
            "AWS_ENDPOINT_URL": self.url,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": self.region,
            "AWS_CONFIG_FILE": "/dev/null",
            "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
        }

    def reset(self) -> None:
        """Forget everything: moto's state, seeded reservations, access entries, the log."""
        conn = http.client.HTTPConnection("127.0.0.1", self.moto_port, timeout=30)
        conn.request("POST", "/moto-api/reset")
        conn.getresponse().read()
        conn.close()
        with self.lock:
            self.requests.clear()
            self.reservations.clear()
            self.topology.clear()
            self.access_entries.clear()
            self.access_policies.clear()
            self.cluster_access.clear()
            self.filesystems.clear()
            self.injections.clear()
            self.nodegroup_callbacks.clear()
            self.termination_callbacks.clear()
            self.callback_errors.clear()
            self.fsx_describes_until_available = 1
            self.cluster_describes_until_active = 0
            self.nodegroup_describes_until_active = 0
            self.pending.clear()
            self.cluster_endpoints.clear()
            self.nodegroup_status.clear()
            self.types_from_template.clear()

    # -- test helpers ----------------------------------------------------------------------

    def add_capacity_reservation(
        self,
        id: str,
        instance_type: str,
        count: int,
        zone: str,
        kind: str = "capacity-block",
        available: int | None = None,
        state: str = "active",
    ) -> CapacityReservation:
        """Seed a capacity reservation (``kind="default"``) or Capacity Block
        (``kind="capacity-block"``); ``available`` defaults to ``count``."""
        assert kind in ("default", "capacity-block"), kind
        res = CapacityReservation(id, instance_type, count, zone, kind, available, state)
        with self.lock:
            self.reservations[id] = res
        return res

    def on_nodegroup_created(self, callback: Callable[[NodegroupCreated], None]) -> None:
        """Call ``callback`` after each successful CreateNodegroup (errors go to
        ``callback_errors``, the response is unaffected)."""
        self.nodegroup_callbacks.append(callback)

    def on_instances_terminated(self, callback: Callable[[list[str]], None]) -> None:
        """Call ``callback(instance_ids)`` after each successful EC2 TerminateInstances (moto
        replaces nothing: ``aws_fake_nodegroup.NodeGroupPlayer`` plays the node group)."""
        self.termination_callbacks.append(callback)

    def fail(
        self,
        service: str,
        action: str,
        status: int = 503,
        code: str | None = None,
        times: int = 1,
        retry_after: str | None = None,
    ) -> None:
        """Answer the next ``times`` ``service:action`` requests with an error (``action="*"``
        matches all of the service)."""
        code = code or handlers.default_error_code(service, status)
        with self.lock:
            self.injections.append(Injection(service, action, status, code, times, retry_after))

    def throttle(self, service: str, action: str, times: int = 1) -> None:
        """The service's own throttling error (EC2 503 RequestLimitExceeded, STS 400
        Throttling, EKS 429 / FSx 400 ThrottlingException)."""
        status, code = handlers.THROTTLE[service]
        self.fail(service, action, status, code, times)

    def set_cluster_endpoint(self, cluster: str, url: str, ca_data: str | None = None) -> None:
        """Make DescribeCluster report ``url`` (a Kubernetes emulator) as the cluster's API
        endpoint, with ``ca_data`` (None: no CA, plain HTTP) instead of moto's made-up ones."""
        with self.lock:
            self.cluster_endpoints[cluster] = (url, ca_data)

    def set_nodegroup_status(
        self, name: str, status: str, issues: list[dict[str, Any]] | None = None
    ) -> None:
        """DescribeNodegroup reports ``name`` so (moto deletes at once and never fails)."""
        with self.lock:
            self.nodegroup_status[name] = (status, list(issues or ()))

    def set_filesystem_lifecycle(self, fs_id: str, lifecycle: str) -> None:
        with self.lock:
            self.filesystems[fs_id]["lifecycle"] = lifecycle

    def actions(self, service: str | None = None) -> list[str]:
        return [r.action for r in self.requests if service in (None, r.service)]

    def writes(self) -> list[Request]:
        """Requests that create, change or delete something (not Describe/List/Get)."""
        return [r for r in self.requests if r.write]

    def sent(self, action: str, service: str | None = None) -> list[dict[str, Any]]:
        """The params of every ``action`` request."""
        return [
            r.params for r in self.requests if r.action == action and service in (None, r.service)
        ]

    def clear_log(self) -> None:
        with self.lock:
            self.requests.clear()

    # -- plumbing (used by the handler) ----------------------------------------------------

    def forward(
        self, method: str, path: str, headers: dict[str, str], body: bytes
    ) -> tuple[int, dict[str, str], bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.moto_port, timeout=60)
        try:
            conn.request(method, path, body=body or None, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
            out = {
                k: v
                for k, v in resp.getheaders()
                if k.lower() not in ("content-length", "connection", "transfer-encoding", "server")
            }
            return resp.status, out, data
        finally:
            conn.close()


def identify(
    method: str, path: str, headers: dict[str, str], body: bytes
) -> tuple[str, str, dict[str, Any]]:
    """(service, action, params) of a signed boto3 request."""
    lower = {k.lower(): v for k, v in headers.items()}
    parsed = urllib.parse.urlsplit(path)
    query = urllib.parse.parse_qs(parsed.query, keep_blank_values=True)
    match = _CREDENTIAL.search(lower.get("authorization", "")) or _CREDENTIAL.search(
        "Credential=" + urllib.parse.unquote(query.get("X-Amz-Credential", [""])[0])
    )
    service = match.group(2) if match else "unknown"
    proto = protocol(service) if match else "unknown"
    if proto in ("query", "ec2"):
        form = urllib.parse.parse_qs(body.decode() or parsed.query, keep_blank_values=True)
        params = {k: v[0] if len(v) == 1 else v for k, v in form.items()}
        return service, str(params.pop("Action", "")), params
    if proto == "json":
        target = lower.get("x-amz-target", "")
        return service, target.rsplit(".", 1)[-1], json.loads(body or b"{}")
    if proto == "rest-json":
        for verb, regex, op in _rest_routes(service):
            m = regex.match(parsed.path)
            if verb == method and m:
                params = json.loads(body or b"{}") if body else {}
                params.update({k: urllib.parse.unquote(v) for k, v in m.groupdict().items()})
                params.update({k: v[0] for k, v in query.items()})
                return service, op, params
    return service, f"{method} {parsed.path}", {}


class _FrontHandler(BaseHTTPRequestHandler):
    owner: AwsFake
    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        super().setup()
        # headers and body go out in two writes: without this, delayed ACKs cost ~40 ms each
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _handle(self) -> None:
        fake = self.owner
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        headers = {k: v for k, v in self.headers.items()}
        service, action, params = identify(self.command, self.path, headers, body)
        injected = handlers.take_injection(fake, service, action)
        with fake.lock:
            fake.requests.append(Request(service, action, params, injected is not None))
        if injected is not None:
            status, out_headers, data = handlers.error_response(
                service, injected.status, injected.code, "injected by the test", injected
            )
        else:
            answer = handlers.answer(fake, service, action, params)
            if answer is None:
                status, out_headers, data = fake.forward(self.command, self.path, headers, body)
                status, out_headers, data = handlers.patch(
                    fake, service, action, params, status, out_headers, data
                )
            else:
                status, out_headers, data = answer
        self.send_response(status)
        for key, value in out_headers.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = _handle
