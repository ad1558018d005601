"""A Kubernetes API over HTTP for backend tests: kmock's ``KubernetesEmulator`` in a thread.

``KubeEmulator`` runs the (async) emulator in a background thread's event loop so the official
*sync* client can talk to it, registers the built-in resources plus the CRDs gpufleet uses
(JobSet, Kueue, GKE network objects), and puts an Airflow connection for it in the environment
(``AIRFLOW_CONN_<ID>``: conn_type kubernetes, extra ``kube_config`` pointing at the emulator,
no auth) so ``KubernetesHook(conn_id=...)`` really goes through the provider.

kmock has no controllers: a test creates what the cluster would (nodes, pods) with
``seed_node``/``seed_pod`` (pods are created, then given a phase through a ``/status`` patch)
and reads back what the emulator stored with ``stored``/``exists`` - independent of the code
under test. ``set_pod_log`` feeds the pod-log reaction, ``set_pod_proxy`` what a pod's port
serves through the API server's pod proxy (``pods/<name>:<port>/proxy/<path>``),
``block_eviction`` makes the eviction reaction answer 429 as a PodDisruptionBudget would,
``fail`` injects API errors (optionally with a ``Retry-After`` header, as an API server sends
with a 429 or 503).

Gaps of kmock 0.8 filled here (each checked against the released package):

- list calls ignore ``labelSelector`` and ``fieldSelector`` (every object comes back):
  ``GpufleetKubeEmulator`` applies both, with the API server's syntax, to list responses;
- ``/api/v1/namespaces`` (list, create) answers 500 and ``/api/v1/namespaces/NAME`` is read as
  "namespace NAME, no resource": the path parser is wrapped so Namespace objects work
  (``tests.support.kmock_fixes``);
- each request is matched against the reactions by re-filtering the whole request history, so
  requests get slower as they add up: ``kmock_fixes`` matches the new request alone;
- ``pods/eviction``, ``pods/log`` and ``pods/proxy`` have no default behaviour (404 "Endpoint
  Not Found"): reactions provide them (kmock reads ``pods/exp-1:9400/proxy/metrics`` as pod
  ``exp-1:9400``, subresource ``proxy/metrics``);
- a create answers 200, not 201 (the typed ``create_*_custom_object`` then returns ``None``);
  nothing sets ``status``;
- nothing sets ``uid``, ``creationTimestamp`` or ``resourceVersion``, lists carry no version and
  a watch ignores ``resourceVersion``, ``allowWatchBookmarks`` and ``timeoutSeconds`` (it
  replays every object as ADDED, then streams forever): ``GpufleetKubeEmulator`` numbers every
  change (one counter, as etcd's revision), stamps the stored object, keeps the last ``keep``
  changes (``compact`` drops more), answers lists with the newest version and serves a watch
  as the API server does from its watch cache: the changes after ``resourceVersion`` (an
  ``ERROR`` event with code 410 when that version was compacted), then a BOOKMARK when asked.
  Unlike a real server it then ends the watch at once (a bounded read: a watch that waited
  for ``timeoutSeconds`` would only slow the tests down).

Usage (one emulator per test module)::

    @pytest.fixture(scope="module")
    def kube():
        with KubeEmulator(conn_id="kmock_test") as emulator:
            yield emulator
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import os
import re
import threading
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

import aiohttp.web
import kmock

from tests.support import kmock_fixes

T = TypeVar("T")

# CRDs gpufleet creates: "group/version/plural" -> discovery info.
CRDS: dict[str, dict[str, Any]] = {
    "jobset.x-k8s.io/v1alpha2/jobsets": {"kind": "JobSet", "namespaced": True},
    "kueue.x-k8s.io/v1beta1/resourceflavors": {"kind": "ResourceFlavor", "namespaced": False},
    "kueue.x-k8s.io/v1beta1/clusterqueues": {"kind": "ClusterQueue", "namespaced": False},
    "kueue.x-k8s.io/v1beta1/localqueues": {"kind": "LocalQueue", "namespaced": True},
    "kueue.x-k8s.io/v1beta1/topologies": {"kind": "Topology", "namespaced": False},
    "kueue.x-k8s.io/v1beta1/workloads": {"kind": "Workload", "namespaced": True},
    "networking.gke.io/v1/networks": {"kind": "Network", "namespaced": False},
    "networking.gke.io/v1/gkenetworkparamsets": {
        "kind": "GKENetworkParamSet",
        "namespaced": False,
    },
}
_CRD_VERBS = {"create", "delete", "get", "list", "patch", "update", "watch"}

PODS = kmock.resource("", "v1", "pods")

# The API server's Status reasons (metav1.StatusReason) for the codes tests inject.
_REASONS = {
    404: "NotFound",
    409: "Conflict",
    429: "TooManyRequests",
    503: "ServiceUnavailable",
    504: "Timeout",
}


# ---- selectors, as the API server reads them ----------------------------------------------

_SET_TERM = re.compile(r"^\s*([^\s!=(),]+)\s+(in|notin)\s*\(([^)]*)\)\s*$")
_EQ_TERM = re.compile(r"^\s*([^\s!=(),]+)\s*(==|=|!=)\s*([^\s,()]*)\s*$")
_EXISTS_TERM = re.compile(r"^\s*(!?)\s*([^\s!=(),]+)\s*$")


class SelectorError(ValueError):
    pass


def _split_terms(selector: str) -> list[str]:
    terms, depth, current = [], 0, ""
    for char in selector:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            terms.append(current)
            current = ""
        else:
            current += char
    terms.append(current)
    return [t for t in terms if t.strip()]


def label_selector_matches(selector: str, labels: dict[str, str]) -> bool:
    """Equality (=, ==, !=), set (in, notin) and existence (key, !key) terms, ANDed."""
    for term in _split_terms(selector):
        if m := _SET_TERM.match(term):
            key, op, raw = m.groups()
            values = {v.strip() for v in raw.split(",") if v.strip()}
            ok = labels.get(key) in values if op == "in" else labels.get(key) not in values
        elif m := _EQ_TERM.match(term):
            key, op, value = m.groups()
            ok = labels.get(key) == value if op in ("=", "==") else labels.get(key) != value
        elif m := _EXISTS_TERM.match(term):
            negate, key = m.groups()
            ok = (key in labels) != bool(negate)
        else:
            raise SelectorError(f"unable to parse requirement: {term!r}")
        if not ok:
            return False
    return True


def field_selector_matches(selector: str, obj: dict[str, Any]) -> bool:
    """``path=value`` / ``path==value`` / ``path!=value`` terms over dotted object paths."""
    for term in _split_terms(selector):
        m = _EQ_TERM.match(term)
        if m is None:
            raise SelectorError(f"invalid field selector term: {term!r}")
        path, op, value = m.groups()
        current: Any = obj
        for part in path.split("."):
            current = current.get(part) if isinstance(current, dict) else None
        actual = "" if current is None else str(current)
        if (actual == value) != (op in ("=", "==")):
            return False
    return True


# ---- the emulator ---------------------------------------------------------------------------


@dataclass
class Fault:
    """An injected API error: requests whose method and path match get ``status``."""

    method: str
    path: re.Pattern[str]
    status: int
    reason: str
    message: str
    times: int | None  # None: until removed
    retry_after: str | None = None  # the Retry-After header to send, if any
    hits: int = 0

    def matches(self, request: kmock.Request) -> bool:
        if self.times is not None and self.hits >= self.times:
            return False
        method = str(getattr(request.method, "value", request.method)).upper()
        return self.method in ("*", method) and bool(self.path.search(request.url.path))

    def response(self) -> aiohttp.web.Response:
        """A ``Status`` document, as the API server answers a failed call."""
        status = {
            "apiVersion": "v1",
            "kind": "Status",
            "metadata": {},
            "status": "Failure",
            "code": self.status,
            "reason": self.reason,
            "message": self.message,
        }
        headers = {"Retry-After": self.retry_after} if self.retry_after is not None else None
        return aiohttp.web.json_response(status, status=self.status, headers=headers)


DEFAULT_KEEP = 1000  # changes a watch can resume from (the API server's watch cache is bounded)


class _VersioningBuses(dict):  # type: ignore[type-arg]
    """kmock's per-resource change buses, each numbering what it is given (``_VersioningBus``)."""

    def __init__(self, emulator: GpufleetKubeEmulator) -> None:
        super().__init__()
        self.emulator = emulator

    def __missing__(self, resource: Any) -> _VersioningBus:
        bus = self[resource] = _VersioningBus(self.emulator, resource)
        return bus


class _VersioningBus:
    """Where kmock announces each change (ADDED/MODIFIED/DELETED, under its lock): the change
    gets the next resource version, recorded for watches."""

    def __init__(self, emulator: GpufleetKubeEmulator, resource: Any) -> None:
        self.emulator = emulator
        self.resource = resource

    async def put(self, item: dict[str, Any]) -> None:
        self.emulator.record_change(self.resource, item)

    def __aiter__(self) -> AsyncIterator[Any]:  # pragma: no cover - _serve_watch is replaced
        raise NotImplementedError("watches are served from the change log")


class GpufleetKubeEmulator(kmock.KubernetesEmulator):
    """kmock's emulator plus label/field selectors on lists, fault injection, and resource
    versions with a change log that watches are served from."""

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        self.faults: list[Fault] = []
        self.version = 0  # the newest resource version handed out
        self.compacted = 0  # the newest version dropped from the log (older ones are gone)
        self.keep = DEFAULT_KEEP
        self.changes: list[tuple[int, Any, dict[str, Any]]] = []  # (version, resource, event)
        self._buses = _VersioningBuses(self)

    def record_change(self, resource: Any, item: dict[str, Any]) -> None:
        """Number one change, stamp it on the event and the stored object, log it."""
        self.version += 1
        raw = dict(item.get("object") or {})
        meta = dict(raw.get("metadata") or {})
        meta["resourceVersion"] = str(self.version)
        if item.get("type") == "ADDED":
            meta.setdefault("uid", str(uuid.uuid4()))
            meta.setdefault("creationTimestamp", datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))
        raw["metadata"] = meta
        item["object"] = raw
        key = (resource, meta.get("namespace"), meta.get("name"))
        if item.get("type") != "DELETED" and key in self._objects:
            stored = self._objects[key]
            if not stored.deleted:
                stored["metadata"] = meta
        self.changes.append((self.version, resource, json.loads(json.dumps(item))))
        self.compact(self.keep)

    def compact(self, keep: int) -> None:
        """Keep only the newest ``keep`` changes; a watch from before them gets 410."""
        if len(self.changes) > keep:
            dropped = self.changes[: len(self.changes) - keep]
            self.changes = self.changes[len(self.changes) - keep :]
            self.compacted = max(self.compacted, dropped[-1][0])

    async def _serve_watch(self, request: kmock.Request) -> AsyncIterator[Any]:
        yield b""  # headers first, as kmock's own watch does
        params = request.params
        since = params.get("resourceVersion") or ""
        labels = params.get("labelSelector") or ""
        fields = params.get("fieldSelector") or ""

        def selected(obj: dict[str, Any]) -> bool:
            meta = obj.get("metadata") or {}
            if request.namespace and meta.get("namespace") != request.namespace:
                return False
            return label_selector_matches(
                labels, meta.get("labels") or {}
            ) and field_selector_matches(fields, obj)

        if since in ("", "0"):  # "start at the most recent": the current objects, as ADDED
            result = await super()._serve_list(request)
            events = [{"type": "ADDED", "object": o} for o in result["items"] if selected(o)]
        elif not since.isdigit() or int(since) < self.compacted:
            yield {
                "type": "ERROR",
                "object": {
                    "kind": "Status",
                    "apiVersion": "v1",
                    "metadata": {},
                    "status": "Failure",
                    "message": f"too old resource version: {since} ({self.compacted + 1})",
                    "reason": "Expired",
                    "code": 410,
                },
            }
            return
        else:
            events = [
                event
                for version, resource, event in list(self.changes)
                if version > int(since)
                and resource == request.resource
                and selected(event.get("object") or {})
            ]
        for event in events:
            yield event
        if params.get("allowWatchBookmarks") in kmock_fixes.TRUE_FLAGS:
            yield {
                "type": "BOOKMARK",
                "object": {"metadata": {"resourceVersion": str(self.version)}},
            }

    async def _handle(self, request: kmock.Request) -> Any:
        # Faults fire before kmock touches its stored objects (it applies creates, patches and
        # deletes ahead of any reaction), so a failed call leaves the state as it was.
        for fault in self.faults:
            if fault.matches(request):
                fault.hits += 1
                return fault.response()
        return await super()._handle(request)

    async def _serve_list(self, request: kmock.Request) -> Any:
        result = await super()._serve_list(request)
        result["metadata"] = {
            **(result.get("metadata") or {}),
            "resourceVersion": str(self.version),
        }
        labels = request.params.get("labelSelector") or ""
        fields = request.params.get("fieldSelector") or ""
        if not labels and not fields:
            return result
        try:
            result["items"] = [
                item
                for item in result["items"]
                if label_selector_matches(labels, (item.get("metadata") or {}).get("labels") or {})
                and field_selector_matches(fields, item)
            ]
        except SelectorError as exc:
            raise kmock.KubernetesError(status=400, reason="BadRequest", message=str(exc)) from exc
        return result


class KubeEmulator:
    """The emulator on 127.0.0.1, served from a background thread, plus test helpers."""

    def __init__(self, conn_id: str = "kmock_test", namespace: str = "default") -> None:
        self.conn_id = conn_id
        self.namespace = namespace
        self.handler: GpufleetKubeEmulator | None = None
        self.url = ""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread: threading.Thread | None = None
        self._request_offset = 0
        self._env_key = f"AIRFLOW_CONN_{conn_id.upper()}"
        self._env_before: str | None = None
        self.logs: dict[tuple[str, str, str | None], str] = {}
        self.proxied: dict[tuple[str, str, int, str], str] = {}
        self.blocked_evictions: set[tuple[str, str]] = set()
        self._raw_client: Any = None

    # ---- lifecycle ----

    def __enter__(self) -> KubeEmulator:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        kmock_fixes.install()
        ready: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._thread = threading.Thread(
            target=self._run, args=(ready,), name="kube-emulator", daemon=True
        )
        self._thread.start()
        ready.result(timeout=30)
        self._env_before = os.environ.get(self._env_key)
        os.environ[self._env_key] = json.dumps(self.connection())

    def stop(self) -> None:
        if self._env_before is None:
            os.environ.pop(self._env_key, None)
        else:
            os.environ[self._env_key] = self._env_before
        if self._raw_client is not None:
            self._raw_client.close()
            self._raw_client = None
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(timeout=30)
        self._thread = self._loop = self._stop = None

    def _run(self, ready: concurrent.futures.Future[None]) -> None:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self._serve(loop, ready))
        except BaseException as exc:  # surface start-up failures in the starting thread
            if not ready.done():
                ready.set_exception(exc)
            raise
        finally:
            loop.close()

    async def _serve(
        self, loop: asyncio.AbstractEventLoop, ready: concurrent.futures.Future[None]
    ) -> None:
        async with GpufleetKubeEmulator() as handler, kmock.Server(handler) as server:
            handler.resources.load_bundled()
            for path, info in CRDS.items():
                handler.resources[path] = kmock.ResourceInfo(
                    kind=info["kind"],
                    namespaced=info["namespaced"],
                    singular=info["kind"].lower(),
                    verbs=_CRD_VERBS,
                    subresources={"status"},
                )
            handler[self._is_log_request] << self._serve_log
            handler[self._is_eviction_request] << self._serve_eviction
            handler[self._is_proxy_request] << self._serve_proxy
            self.handler = handler
            self.url = str(server.url).rstrip("/")
            self._loop = loop
            self._stop = asyncio.Event()
            ready.set_result(None)
            await self._stop.wait()

    def call(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` in the emulator's event loop thread and return its result."""
        assert self._loop is not None, "the emulator is not running"

        async def run() -> T:
            return fn()

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(timeout=30)

    def reset(self) -> None:
        """Forget every object, request, log, eviction block and fault."""

        def clear() -> None:
            assert self.handler is not None
            self.handler.objects.clear()
            self.handler.faults.clear()
            # versions go on (as a cluster's do); a watch from before the reset gets 410
            self.handler.changes.clear()
            self.handler.compacted = self.handler.version
            self.handler.keep = DEFAULT_KEEP
            self._forget_requests()

        self.logs.clear()
        self.proxied.clear()
        self.blocked_evictions.clear()
        self.call(clear)
        self._request_offset = 0

    def _forget_requests(self) -> None:
        # kmock matches every new request by re-filtering its whole request history through
        # each reaction (``request in view``), so each call gets slower as requests pile up.
        # Dropping the history between tests keeps a module's calls at ~2 ms.
        assert self.handler is not None
        self.handler._requests.clear()
        for reaction in self.handler._payloads:
            reaction._requests.clear()

    def reset_requests(self) -> None:
        """Count requests from here (e.g. after seeding)."""
        assert self.handler is not None
        handler = self.handler
        self._request_offset = self.call(lambda: len(list(handler)))

    # ---- the Airflow connection ----

    def kube_config(self) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {"name": "kmock", "cluster": {"server": self.url, "insecure-skip-tls-verify": True}}
            ],
            "users": [{"name": "anonymous", "user": {}}],
            "contexts": [
                {
                    "name": "kmock",
                    "context": {
                        "cluster": "kmock",
                        "user": "anonymous",
                        "namespace": self.namespace,
                    },
                }
            ],
            "current-context": "kmock",
        }

    def connection(self) -> dict[str, Any]:
        """The ``AIRFLOW_CONN_<ID>`` JSON document for this emulator."""
        return {
            "conn_type": "kubernetes",
            "extra": {"kube_config": self.kube_config(), "namespace": self.namespace},
        }

    # ---- an independent client, for seeding what a cluster would create ----

    @property
    def raw_client(self) -> Any:
        """An official ``ApiClient`` of its own (not the hook's) pointed at the emulator."""
        if self._raw_client is None:
            from kubernetes import client

            config = client.Configuration()
            config.host = self.url
            self._raw_client = client.ApiClient(config)
        return self._raw_client

    @property
    def core(self) -> Any:
        from kubernetes import client

        return client.CoreV1Api(self.raw_client)

    def seed_node(
        self,
        name: str,
        pool: str | None = None,
        *,
        pool_label: str = "gpufleet.io/pool",
        ready: bool = True,
        labels: dict[str, str] | None = None,
        taints: list[dict[str, Any]] | None = None,
        unschedulable: bool = False,
    ) -> dict[str, Any]:
        """A node as the cloud's node pool would register it, with a Ready condition."""
        all_labels = {"kubernetes.io/hostname": name, **(labels or {})}
        if pool is not None:
            all_labels[pool_label] = pool
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": all_labels},
            "spec": {},
        }
        if taints:
            body["spec"]["taints"] = taints
        if unschedulable:
            body["spec"]["unschedulable"] = True
        self.core.create_node(body)
        status = {
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True" if ready else "False",
                    "reason": "KubeletReady" if ready else "KubeletNotReady",
                }
            ]
        }
        self.core.patch_node_status(name, {"status": status})
        return self.stored("v1/nodes", None, name) or {}

    def seed_event(self, event: dict[str, Any], namespace: str = "default") -> dict[str, Any]:
        """Create an Event (a core/v1 ``Event`` manifest, e.g. one of tests/data/events/) as
        the component that reports it would; the stored object."""
        body = json.loads(json.dumps(event))
        body["metadata"] = {**(body.get("metadata") or {}), "namespace": namespace}
        body["metadata"].pop("resourceVersion", None)
        body["metadata"].pop("uid", None)
        self.core.create_namespaced_event(namespace, body)
        return self.stored("v1/events", namespace, body["metadata"]["name"]) or {}

    @property
    def resource_version(self) -> str:
        """The newest resource version the emulator handed out."""
        assert self.handler is not None
        return str(self.handler.version)

    def compact(self, keep: int = 0) -> None:
        """Drop all but the newest ``keep`` changes: a watch from before them gets 410."""
        handler = self.handler
        assert handler is not None
        self.call(lambda: handler.compact(keep))

    def seed_pod(
        self,
        name: str,
        namespace: str | None = None,
        *,
        node: str | None = None,
        labels: dict[str, str] | None = None,
        phase: str | None = "Running",
        message: str | None = None,
        init_containers: list[dict[str, Any]] | None = None,
        init_statuses: list[dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        """Create a pod as a controller would, then give it ``phase`` via a /status patch
        (``init_containers``: its spec's, with the kubelet's ``init_statuses`` for them)."""
        namespace = namespace or self.namespace
        spec: dict[str, Any] = {"containers": [{"name": "main", "image": "busybox"}]}
        if init_containers:
            spec["initContainers"] = init_containers
        if node:
            spec["nodeName"] = node
        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": dict(labels or {})},
            "spec": spec,
        }
        self.core.create_namespaced_pod(namespace, body)
        if phase is not None:
            self.set_pod_phase(name, namespace, phase, message=message)
        if init_statuses:
            self.patch_status("v1/pods", namespace, name, {"initContainerStatuses": init_statuses})
        return self.stored("v1/pods", namespace, name) or {}

    def set_pod_phase(
        self, name: str, namespace: str | None, phase: str, *, message: str | None = None
    ) -> None:
        status: dict[str, Any] = {"phase": phase}
        if message:
            status["message"] = message
        self.core.patch_namespaced_pod_status(name, namespace or self.namespace, {"status": status})

    def patch_status(self, resource: str, namespace: str | None, name: str, status: Any) -> None:
        """Patch ``/status`` of any stored object through the API (as a controller would)."""
        group_version, _, plural = resource.rpartition("/")
        prefix = "/api/v1" if group_version == "v1" else f"/apis/{group_version}"
        scope = f"/namespaces/{namespace}" if namespace else ""
        self.raw_client.call_api(
            f"{prefix}{scope}/{plural}/{name}/status",
            "PATCH",
            body={"status": status},
            header_params={"Content-Type": "application/merge-patch+json"},
            _preload_content=False,
        )

    # ---- what the emulator stored ----

    def stored(self, resource: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        """The stored object (``resource`` as ``group/version/plural`` or ``v1/plural``)."""

        def read() -> dict[str, Any] | None:
            assert self.handler is not None
            key = (kmock.resource(resource), namespace, name)
            if key not in self.handler.objects:
                return None
            obj = self.handler.objects[key]
            return None if obj.deleted else obj.raw

        return self.call(read)

    def exists(self, resource: str, namespace: str | None, name: str) -> bool:
        return self.stored(resource, namespace, name) is not None

    def stored_keys(self) -> list[tuple[str, str | None, str]]:
        """Every live object as ("group/version/plural", namespace, name)."""

        def read() -> list[tuple[str, str | None, str]]:
            assert self.handler is not None
            out = []
            for (res, namespace, name), obj in self.handler.objects.items():
                if not obj.deleted:
                    gv = f"{res.group}/{res.version}" if res.group else res.version
                    out.append((f"{gv}/{res.plural}", namespace, name))
            return out

        return self.call(read)

    def requests(self) -> list[kmock.Request]:
        """Requests served since the last ``reset``."""
        assert self.handler is not None
        handler = self.handler
        return self.call(lambda: list(handler)[self._request_offset :])

    # ---- reactions: pod logs, evictions, faults ----

    def set_pod_log(
        self, pod: str, text: str, namespace: str | None = None, container: str | None = None
    ) -> None:
        self.logs[(namespace or self.namespace, pod, container)] = text

    def set_pod_proxy(
        self,
        pod: str,
        text: str,
        namespace: str | None = None,
        *,
        port: int = 9400,
        path: str = "metrics",
    ) -> None:
        """What ``GET pods/<pod>:<port>/proxy/<path>`` answers (a port nothing listens on
        answers 503, as the API server does when it cannot dial the pod)."""
        self.proxied[(namespace or self.namespace, pod, port, path)] = text

    def block_eviction(self, pod: str, namespace: str | None = None) -> None:
        """Answer evictions of ``pod`` with 429, as the API does when a PDB forbids it."""
        self.blocked_evictions.add((namespace or self.namespace, pod))

    @contextlib.contextmanager
    def fail(
        self,
        method: str,
        path: str,
        status: int = 503,
        *,
        times: int | None = None,
        reason: str | None = None,
        message: str | None = None,
        retry_after: str | None = None,
    ) -> Iterator[Fault]:
        """Answer requests (``method`` or "*", ``path`` a regex searched in the URL path) with
        ``status``; ``times`` requests at most (None: every one until the block ends), each with
        a ``Retry-After: retry_after`` header when given. Faults are tried in the order they
        were added; the first that matches answers."""
        fault = Fault(
            method=method.upper(),
            path=re.compile(path),
            status=status,
            reason=reason or _REASONS.get(status, "InternalError"),
            message=message or f"injected fault: HTTP {status}",
            times=times,
            retry_after=retry_after,
        )
        assert self.handler is not None
        handler = self.handler
        self.call(lambda: handler.faults.append(fault))
        try:
            yield fault
        finally:
            self.call(lambda: handler.faults.remove(fault))

    @staticmethod
    def _is_log_request(request: kmock.Request) -> bool:
        return (
            request.method == kmock.method.GET
            and request.resource == PODS
            and request.subresource == "log"
        )

    def _serve_log(self, request: kmock.Request) -> kmock.Response:
        namespace, pod = request.namespace or "", request.name or ""
        if not self._pod_exists(namespace, pod):
            raise kmock.KubernetesError(
                status=404, reason="NotFound", message=f'pods "{pod}" not found'
            )
        container = request.params.get("container") or None
        text = self.logs.get((namespace, pod, container))
        if text is None:
            text = self.logs.get((namespace, pod, None), "")
        return kmock.Response(
            status=200,
            headers={"Content-Type": "text/plain; charset=utf-8"},
            payload=text.encode("utf-8"),
        )

    @staticmethod
    def _is_proxy_request(request: kmock.Request) -> bool:
        return (
            request.method == kmock.method.GET
            and request.resource == PODS
            and (request.subresource or "").split("/")[0] == "proxy"
        )

    def _serve_proxy(self, request: kmock.Request) -> kmock.Response:
        namespace, name = request.namespace or "", request.name or ""
        pod, _, port = name.partition(":")
        if not self._pod_exists(namespace, pod):
            raise kmock.KubernetesError(
                status=404, reason="NotFound", message=f'pods "{pod}" not found'
            )
        path = (request.subresource or "").partition("/")[2]
        text = self.proxied.get((namespace, pod, int(port or 80), path))
        if text is None:
            raise kmock.KubernetesError(
                status=503,
                reason="ServiceUnavailable",
                message=f"error trying to reach service: dial tcp 10.0.0.1:{port or 80}: "
                "connect: connection refused",
            )
        return kmock.Response(
            status=200,
            headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"},
            payload=text.encode("utf-8"),
        )

    @staticmethod
    def _is_eviction_request(request: kmock.Request) -> bool:
        return (
            request.method == kmock.method.POST
            and request.resource == PODS
            and request.subresource == "eviction"
        )

    def _serve_eviction(self, request: kmock.Request) -> kmock.Response:
        namespace, pod = request.namespace or "", request.name or ""
        if not self._pod_exists(namespace, pod):
            raise kmock.KubernetesError(
                status=404, reason="NotFound", message=f'pods "{pod}" not found'
            )
        if (namespace, pod) in self.blocked_evictions:
            raise kmock.KubernetesError(
                status=429,
                reason="TooManyRequests",
                message="Cannot evict pod as it would violate the pod's disruption budget.",
            )
        assert self.handler is not None
        self.handler.objects[PODS, namespace, pod].delete()
        return kmock.Response(
            status=201,
            payload={"apiVersion": "v1", "kind": "Status", "status": "Success", "code": 201},
        )

    def _pod_exists(self, namespace: str, pod: str) -> bool:
        assert self.handler is not None
        key = (PODS, namespace, pod)
        return key in self.handler.objects and not self.handler.objects[key].deleted
