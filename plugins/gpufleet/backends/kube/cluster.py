"""``ClusterBackend`` for a real Kubernetes cluster, through the cncf provider's KubernetesHook.

The hook is the adapter: it reads the Airflow connection (extras ``kube_config``,
``kube_config_path``, ``in_cluster``, ``namespace``) and hands out the official client's
``CoreV1Api``, ``BatchV1Api`` and ``CustomObjectsApi``; this module holds no HTTP of its own.

Calls are made with ``_preload_content=False`` and the JSON body is decoded here, so every
method sees exactly what the API server stored (unknown fields included, no client-side model
validation) and object-returning methods give plain manifest dicts. It also sidesteps two client
behaviours: custom-object creates answered with an unexpected 2xx code deserialize to ``None``,
and pod logs that happen to parse as JSON get mangled by the model layer.

Every ``ApiException`` becomes a :class:`~gpufleet.errors.BackendError` saying which call on
which object failed, with the HTTP status, reason and the server's message; throttling (429),
server errors (5xx) and connection failures become
:class:`~gpufleet.errors.TransientBackendError` so Airflow retries can take them.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from functools import cached_property
from typing import TYPE_CHECKING, Any

from gpufleet.backends.base import NodeInfo, PodInfo, Taint, WorkloadStatus
from gpufleet.domain.workloads import (
    JOB_NAME_LABEL,
    JOBSET_NAME_LABEL,
    LEGACY_JOB_NAME_LABEL,
    POOL_LABEL,
    WORKLOAD_LABEL,
)
from gpufleet.errors import BackendError, TransientBackendError

if TYPE_CHECKING:
    from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook

log = logging.getLogger(__name__)

# Labels that name the workload a pod belongs to, most specific first.
WORKLOAD_NAME_LABELS = (JOBSET_NAME_LABEL, JOB_NAME_LABEL, LEGACY_JOB_NAME_LABEL)
VALIDATION_WORKLOAD = "validation"

_FOREGROUND_KINDS = frozenset({"Job", "JobSet"})
_PATCH_ATTEMPTS = 3  # read-modify-write of node taints, retried on a 409 resourceVersion clash
_MERGE_PATCH = "application/merge-patch+json"


class KubeApiError(BackendError):
    """A Kubernetes API call answered with an error status (``status``, ``reason``)."""

    def __init__(self, message: str, *, status: int, reason: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason


class TransientKubeApiError(KubeApiError, TransientBackendError):
    """Throttled (429) or a server error (5xx): a retry may succeed."""


@dataclass(frozen=True)
class KindInfo:
    """Where a kind lives in the API: group/version/plural and whether it is namespaced."""

    kind: str
    group: str  # "" for the core group
    version: str
    plural: str
    namespaced: bool
    api: str  # core | batch | custom
    snake: str = ""  # typed-client method suffix (core/batch), e.g. persistent_volume_claim

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


# The kinds gpufleet creates. Custom objects go through CustomObjectsApi with this plural/scope.
KINDS: dict[str, KindInfo] = {
    k.kind: k
    for k in (
        KindInfo("Namespace", "", "v1", "namespaces", False, "core", "namespace"),
        KindInfo("ConfigMap", "", "v1", "configmaps", True, "core", "config_map"),
        KindInfo("Secret", "", "v1", "secrets", True, "core", "secret"),
        KindInfo(
            "PersistentVolume", "", "v1", "persistentvolumes", False, "core", "persistent_volume"
        ),
        KindInfo(
            "PersistentVolumeClaim",
            "",
            "v1",
            "persistentvolumeclaims",
            True,
            "core",
            "persistent_volume_claim",
        ),
        KindInfo("Pod", "", "v1", "pods", True, "core", "pod"),
        KindInfo("Job", "batch", "v1", "jobs", True, "batch", "job"),
        KindInfo("JobSet", "jobset.x-k8s.io", "v1alpha2", "jobsets", True, "custom"),
        KindInfo("ResourceFlavor", "kueue.x-k8s.io", "v1beta1", "resourceflavors", False, "custom"),
        KindInfo("ClusterQueue", "kueue.x-k8s.io", "v1beta1", "clusterqueues", False, "custom"),
        KindInfo("LocalQueue", "kueue.x-k8s.io", "v1beta1", "localqueues", True, "custom"),
        KindInfo("Network", "networking.gke.io", "v1", "networks", False, "custom"),
        KindInfo(
            "GKENetworkParamSet", "networking.gke.io", "v1", "gkenetworkparamsets", False, "custom"
        ),
    )
}


def kind_info(kind: str, api_version: str | None = None) -> KindInfo:
    """The API location of ``kind``; a custom kind may name another version of its group."""
    info = KINDS.get(kind)
    if info is None:
        raise BackendError(
            f"cannot handle Kubernetes kind {kind!r}: gpufleet's cluster backend knows "
            f"{', '.join(sorted(KINDS))}. Check the manifest's 'kind', or add the kind to "
            "gpufleet.backends.kube.cluster.KINDS."
        )
    if api_version and api_version != info.api_version:
        group, _, version = api_version.rpartition("/")
        if info.api != "custom" or group != info.group or not version:
            raise BackendError(
                f"{kind} has apiVersion {info.api_version}, not {api_version!r}: fix the "
                "manifest's 'apiVersion'"
            )
        info = KindInfo(kind, group, version, info.plural, info.namespaced, "custom")
    return info


class KubeClusterBackend:
    """One Kubernetes cluster, reached through the Airflow connection ``conn_id``."""

    def __init__(
        self,
        conn_id: str = "kubernetes_default",
        pool_label_keys: Iterable[str] = (POOL_LABEL,),
        *,
        hook: KubernetesHook | None = None,
    ) -> None:
        self.conn_id = conn_id
        self.pool_label_keys = tuple(pool_label_keys)
        if not self.pool_label_keys:
            raise ValueError("pool_label_keys must name at least one node label")
        if hook is not None:
            self.__dict__["hook"] = hook

    def __repr__(self) -> str:
        return f"KubeClusterBackend(conn_id={self.conn_id!r})"

    # ---- clients -------------------------------------------------------------------------

    @cached_property
    def hook(self) -> KubernetesHook:
        from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook

        return KubernetesHook(conn_id=self.conn_id)

    def _client(self, attr: str) -> Any:
        try:
            return getattr(self.hook, attr)
        except BackendError:
            raise
        except Exception as exc:  # missing connection, unreadable kubeconfig, ...
            raise BackendError(
                f"cannot build a Kubernetes client from Airflow connection {self.conn_id!r}: "
                f"{type(exc).__name__}: {exc}. Check that the connection exists (conn_type "
                "kubernetes) and that its kube_config / kube_config_path / in_cluster extra "
                "is valid."
            ) from exc

    @property
    def core(self) -> Any:
        return self._client("core_v1_client")

    @property
    def batch(self) -> Any:
        return self._client("batch_v1_client")

    @property
    def custom(self) -> Any:
        return self._client("custom_object_client")

    @cached_property
    def default_namespace(self) -> str:
        try:
            return self.hook.get_namespace() or "default"
        except Exception:  # the namespace is a convenience; the real error surfaces on use
            return "default"

    # ---- call plumbing -------------------------------------------------------------------

    def _raw(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> bytes:
        """Call an official-client method and return the raw body; wrap every failure."""
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError as Urllib3Error

        try:
            resp = fn(*args, _preload_content=False, **kwargs)
        except ApiException as exc:
            raise _api_error(what, exc, self.conn_id) from exc
        except (Urllib3Error, OSError) as exc:
            raise TransientBackendError(
                f"{what}: cannot reach the Kubernetes API of connection {self.conn_id!r} "
                f"({type(exc).__name__}: {exc}); retry, and check the cluster endpoint if it "
                "persists"
            ) from exc
        try:
            return resp.data
        finally:
            resp.release_conn()

    def _json(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        data = self._raw(what, fn, *args, **kwargs)
        if not data:
            return None
        try:
            return json.loads(data)
        except ValueError as exc:
            raise BackendError(
                f"{what}: the Kubernetes API answered with something that is not JSON: "
                f"{data[:200]!r}"
            ) from exc

    # ---- objects -------------------------------------------------------------------------

    def _kind_call(
        self, verb: str, info: KindInfo, namespace: str | None, **kwargs: Any
    ) -> tuple[Callable[..., Any], dict[str, Any]]:
        """The official-client method for ``verb`` (read/create/delete) on ``info`` + kwargs."""
        if info.api == "custom":
            scope = "namespaced" if info.namespaced else "cluster"
            fn = getattr(self.custom, f"{'get' if verb == 'read' else verb}_{scope}_custom_object")
            kwargs.update(group=info.group, version=info.version, plural=info.plural)
        else:
            api = self.core if info.api == "core" else self.batch
            fn = getattr(api, f"{verb}_{'namespaced_' if info.namespaced else ''}{info.snake}")
        if info.namespaced:
            kwargs["namespace"] = namespace
        return fn, kwargs

    def _read(self, info: KindInfo, name: str, namespace: str | None) -> dict[str, Any]:
        fn, kwargs = self._kind_call("read", info, namespace, name=name)
        return self._json(f"read {info.kind} {_ref(name, namespace)}", fn, **kwargs)

    def _create(self, info: KindInfo, body: dict[str, Any], namespace: str | None) -> Any:
        fn, kwargs = self._kind_call("create", info, namespace, body=body)
        return self._json(
            f"create {info.kind} {_ref(body['metadata']['name'], namespace)}", fn, **kwargs
        )

    def apply(self, manifest: dict[str, Any]) -> dict[str, Any]:
        """Create the object; if one of that kind and name exists, return it untouched.

        Idempotent "ensure": a 409 from the create reads the stored object back. An object
        that exists but is being deleted raises TransientBackendError (retry once it is gone).
        """
        kind = manifest.get("kind")
        metadata = manifest.get("metadata") or {}
        name = metadata.get("name")
        if not kind or not name:
            raise BackendError(
                "cannot apply a manifest without 'kind' and 'metadata.name' "
                f"(got kind={kind!r}, name={name!r})"
            )
        info = kind_info(kind, manifest.get("apiVersion"))
        body = dict(manifest)
        body["apiVersion"] = info.api_version
        body["metadata"] = dict(metadata)
        namespace: str | None = None
        if info.namespaced:
            namespace = metadata.get("namespace") or self.default_namespace
            body["metadata"]["namespace"] = namespace
        else:
            body["metadata"].pop("namespace", None)
        try:
            created = self._create(info, body, namespace)
        except KubeApiError as exc:
            if exc.status != 409:
                raise
            existing = self._read_existing(info, name, namespace, exc)
            log.info("%s %s already exists; left as is", kind, _ref(name, namespace))
            return existing
        if not isinstance(created, dict) or not created.get("metadata"):
            # Some servers/emulators answer a create with an empty body: read it back.
            created = self._read(info, name, namespace)
        log.info("created %s %s", kind, _ref(name, namespace))
        return created

    def _read_existing(
        self, info: KindInfo, name: str, namespace: str | None, conflict: BackendError
    ) -> dict[str, Any]:
        try:
            existing = self._read(info, name, namespace)
        except KubeApiError as exc:
            if exc.status == 404:  # deleted between the create and the read
                raise TransientBackendError(
                    f"{info.kind} {_ref(name, namespace)} existed a moment ago and is gone "
                    "now; retry the apply"
                ) from conflict
            raise
        if (existing.get("metadata") or {}).get("deletionTimestamp"):
            raise TransientBackendError(
                f"{info.kind} {_ref(name, namespace)} exists but is being deleted; retry the "
                "apply once it is gone"
            ) from conflict
        return existing

    def delete(self, kind: str, name: str, namespace: str | None = None) -> bool:
        """Delete (foreground propagation for Job/JobSet); False if it did not exist."""
        info = kind_info(kind)
        namespace = (namespace or self.default_namespace) if info.namespaced else None
        policy = "Foreground" if info.kind in _FOREGROUND_KINDS else "Background"
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": policy}
        fn, kwargs = self._kind_call("delete", info, namespace, name=name, body=body)
        try:
            self._raw(f"delete {info.kind} {_ref(name, namespace)}", fn, **kwargs)
        except KubeApiError as exc:
            if exc.status == 404:
                return False
            raise
        log.info("deleted %s %s (%s)", info.kind, _ref(name, namespace), policy)
        return True

    # ---- nodes ---------------------------------------------------------------------------

    def list_nodes(self, pool: str | None = None) -> list[NodeInfo]:
        """Nodes of ``pool`` (all nodes when None), with the training workloads on each.

        A node's pool is the value of the first of ``pool_label_keys`` it carries; with a pool
        given, one labelled list per key is made and only nodes whose pool is ``pool`` kept.
        Workloads come from one cluster-wide list of running pods.
        """
        raw_nodes: dict[str, dict[str, Any]] = {}
        if pool is None:
            for item in self._list_items("list nodes", self.core.list_node):
                raw_nodes[item["metadata"]["name"]] = item
        else:
            for key in self.pool_label_keys:
                selector = f"{key}={pool}"
                items = self._list_items(
                    f"list nodes ({selector})", self.core.list_node, label_selector=selector
                )
                for item in items:
                    raw_nodes.setdefault(item["metadata"]["name"], item)
        nodes = [self._node_info(item) for item in raw_nodes.values()]
        if pool is not None:
            nodes = [n for n in nodes if n.pool == pool]
        if not nodes:
            return []
        workloads = self._workloads_by_node()
        return [
            replace(n, workloads=tuple(sorted(workloads.get(n.name, ()))))
            for n in sorted(nodes, key=lambda n: n.name)
        ]

    def _node_info(self, item: dict[str, Any]) -> NodeInfo:
        metadata = item.get("metadata") or {}
        labels = dict(metadata.get("labels") or {})
        spec = item.get("spec") or {}
        status = item.get("status") or {}
        pool = next((labels[k] for k in self.pool_label_keys if labels.get(k)), None)
        ready = any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in status.get("conditions") or ()
        )
        taints = tuple(
            Taint(key=t["key"], value=t.get("value"), effect=t.get("effect", "NoSchedule"))
            for t in spec.get("taints") or ()
            if t.get("key")
        )
        return NodeInfo(
            name=metadata["name"],
            pool=pool,
            labels=labels,
            taints=taints,
            unschedulable=bool(spec.get("unschedulable")),
            ready=ready,
        )

    def _workloads_by_node(self) -> dict[str, set[str]]:
        """Node name -> names of non-validation Jobs/JobSets with a pod bound there that has not
        finished (running, or bound and still starting: its GPUs are taken either way)."""
        selector = f"{WORKLOAD_LABEL}!={VALIDATION_WORKLOAD}"
        pods = self._list_items(
            "list active pods (all namespaces)",
            self.core.list_pod_for_all_namespaces,
            label_selector=selector,
            field_selector="status.phase!=Succeeded,status.phase!=Failed",
        )
        by_node: dict[str, set[str]] = {}
        for pod in pods:
            labels = (pod.get("metadata") or {}).get("labels") or {}
            node = (pod.get("spec") or {}).get("nodeName")
            phase = (pod.get("status") or {}).get("phase")
            # The server applied both selectors already; re-checking is cheap and keeps the
            # answer right against API servers (or emulators) that ignore selectors.
            if (
                not node
                or phase not in ("Pending", "Running")
                or labels.get(WORKLOAD_LABEL) == VALIDATION_WORKLOAD
            ):
                continue
            workload = next((labels[k] for k in WORKLOAD_NAME_LABELS if labels.get(k)), None)
            if workload:  # DaemonSet and other unowned pods do not make a node busy
                by_node.setdefault(node, set()).add(workload)
        return by_node

    def _patch_node(self, node: str, body: dict[str, Any], what: str) -> dict[str, Any]:
        return self._json(
            f"{what} on node {node}",
            self.core.patch_node,
            node,
            body,
            _content_type=_MERGE_PATCH,
        )

    def set_unschedulable(self, node: str, unschedulable: bool) -> None:
        """Cordon (True) or uncordon (False) ``node``."""
        # Like kubectl: uncordon drops the field rather than storing false.
        value = True if unschedulable else None
        what = "cordon" if unschedulable else "uncordon"
        self._patch_node(node, {"spec": {"unschedulable": value}}, what)
        log.info("%s node %s", what, node)

    def add_taint(self, node: str, taint: Taint) -> None:
        """Add ``taint``, replacing one with the same key and effect; other taints stay."""

        def change(taints: list[dict[str, Any]]) -> list[dict[str, Any]]:
            if any(_same_taint(t, taint) and t.get("value") == taint.value for t in taints):
                return taints  # already there
            kept = [t for t in taints if not _same_taint(t, taint)]
            return [*kept, taint.as_dict()]

        self._update_taints(node, change, f"add taint {taint.key}:{taint.effect}")

    def remove_taint(self, node: str, key: str) -> None:
        """Remove every taint with ``key`` (any effect); nothing to do if there is none."""
        self._update_taints(
            node, lambda taints: [t for t in taints if t.get("key") != key], f"remove taint {key}"
        )

    def _update_taints(
        self,
        node: str,
        change: Callable[[list[dict[str, Any]]], list[dict[str, Any]]],
        what: str,
    ) -> None:
        # Taints are a list without a merge key, so this is read-modify-write; the patch carries
        # the resourceVersion it was computed from, and a 409 (someone else changed the node in
        # between) re-reads and tries again.
        for attempt in range(1, _PATCH_ATTEMPTS + 1):
            current = self._json(f"read node {node}", self.core.read_node, node)
            taints = list((current.get("spec") or {}).get("taints") or [])
            desired = change(taints)
            if desired == taints:
                return
            body: dict[str, Any] = {"spec": {"taints": desired}}
            version = (current.get("metadata") or {}).get("resourceVersion")
            if version:
                body["metadata"] = {"resourceVersion": version}
            try:
                self._patch_node(node, body, what)
            except KubeApiError as exc:
                if exc.status == 409 and attempt < _PATCH_ATTEMPTS:
                    continue
                raise
            log.info("%s on node %s", what, node)
            return

    def set_labels(self, node: str, labels: dict[str, str | None]) -> None:
        """Set node labels; a None value removes the label (JSON merge patch null)."""
        if not labels:
            return
        self._patch_node(node, {"metadata": {"labels": dict(labels)}}, "set labels")
        log.info("labels %s on node %s", labels, node)

    # ---- pods ----------------------------------------------------------------------------

    def list_pods(self, namespace: str | None, selector: str) -> list[PodInfo]:
        """Pods matching the label ``selector`` in ``namespace`` (all namespaces if None)."""
        if namespace is None:
            items = self._list_items(
                f"list pods ({selector or 'all'}) in all namespaces",
                self.core.list_pod_for_all_namespaces,
                label_selector=selector,
            )
        else:
            items = self._list_items(
                f"list pods ({selector or 'all'}) in namespace {namespace}",
                self.core.list_namespaced_pod,
                namespace,
                label_selector=selector,
            )
        return sorted((_pod_info(item) for item in items), key=lambda p: p.name)

    def evict(self, pod: str, namespace: str) -> bool:
        """Evict ``pod`` through the Eviction API, which honours PodDisruptionBudgets.

        True when the eviction was accepted, and also when the pod no longer exists (404): the
        goal, the pod being off its node, is met. False when a PDB refuses for now (429): retry
        later. A pod covered by more than one PDB cannot be evicted at all: BackendError.
        """
        body = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": pod, "namespace": namespace},
        }
        try:
            self._raw(
                f"evict pod {namespace}/{pod}",
                self.core.create_namespaced_pod_eviction,
                pod,
                namespace,
                body,
            )
        except KubeApiError as exc:
            status = exc.status
            if status == 429:
                log.info(
                    "eviction of pod %s/%s refused for now (PodDisruptionBudget)", namespace, pod
                )
                return False
            if status == 404:
                return True
            raise
        log.info("evicted pod %s/%s", namespace, pod)
        return True

    def pod_logs(self, pod: str, namespace: str, container: str | None = None) -> str:
        kwargs: dict[str, Any] = {}
        if container:
            kwargs["container"] = container
        where = f"pod {namespace}/{pod}" + (f" container {container}" if container else "")
        data = self._raw(
            f"read logs of {where}", self.core.read_namespaced_pod_log, pod, namespace, **kwargs
        )
        return data.decode("utf-8", errors="replace") if data else ""

    # ---- workloads -----------------------------------------------------------------------

    def workload_status(self, kind: str, name: str, namespace: str) -> WorkloadStatus:
        """Phase of a batch/v1 Job or a JobSet, with its pods.

        Succeeded/Failed from the status conditions (JobSet ``Completed``/``Failed`` or
        ``status.terminalState``; Job ``Complete``/``Failed``). Otherwise: ``spec.suspend``
        true -> Pending (waiting for Kueue admission); Running when every expected pod
        (replicas x parallelism) runs; Admitted when explicitly unsuspended
        (``spec.suspend: false``, how Kueue admits) but not all pods run yet; Pending otherwise.
        NotFound when the object does not exist.
        """
        if kind not in ("Job", "JobSet"):
            raise BackendError(
                f"workload_status handles kinds Job and JobSet, not {kind!r} "
                f"({_ref(name, namespace)})"
            )
        info = kind_info(kind)
        try:
            obj = self._read(info, name, namespace)
        except KubeApiError as exc:
            if exc.status == 404:
                return WorkloadStatus(kind, name, namespace, "NotFound", message="not found")
            raise
        spec = obj.get("spec") or {}
        status = obj.get("status") or {}
        conditions = {
            c.get("type"): c for c in status.get("conditions") or () if c.get("status") == "True"
        }
        pods = tuple(self._workload_pods(kind, name, namespace))

        if kind == "JobSet":
            terminal = status.get("terminalState")
            done_ok = "Completed" in conditions or terminal == "Completed"
            failed = "Failed" in conditions or terminal == "Failed"
            expected = sum(
                int(rj.get("replicas", 1) or 0) * _job_pods(rj.get("template", {}).get("spec", {}))
                for rj in spec.get("replicatedJobs") or ()
            )
        else:
            done_ok = "Complete" in conditions or "SuccessCriteriaMet" in conditions
            failed = "Failed" in conditions or "FailureTarget" in conditions
            expected = _job_pods(spec)

        if failed:
            cond = conditions.get("Failed") or conditions.get("FailureTarget") or {}
            return WorkloadStatus(kind, name, namespace, "Failed", pods, _cond_message(cond))
        if done_ok:
            cond = conditions.get("Completed") or conditions.get("Complete") or {}
            return WorkloadStatus(kind, name, namespace, "Succeeded", pods, _cond_message(cond))
        if spec.get("suspend") is True or "Suspended" in conditions:
            return WorkloadStatus(
                kind, name, namespace, "Pending", pods, "suspended: waiting for admission (Kueue)"
            )
        running = [p for p in pods if p.phase == "Running"]
        if expected <= 0:  # nothing to count from the spec: judge by the pods that exist
            expected = len(pods)
        if expected > 0 and len(running) >= expected:
            return WorkloadStatus(kind, name, namespace, "Running", pods)
        waiting = f"{len(running)}/{expected} pods running"
        stuck = next((p for p in pods if p.phase != "Running" and p.message), None)
        if stuck is not None:
            waiting += f"; {stuck.name}: {stuck.message}"
        phase = "Admitted" if spec.get("suspend") is False else "Pending"
        return WorkloadStatus(kind, name, namespace, phase, pods, waiting)

    def _workload_pods(self, kind: str, name: str, namespace: str) -> list[PodInfo]:
        if kind == "JobSet":
            return self.list_pods(namespace, f"{JOBSET_NAME_LABEL}={name}")
        pods = self.list_pods(namespace, f"{JOB_NAME_LABEL}={name}")
        if not pods:  # clusters before 1.27 only set the legacy label
            pods = self.list_pods(namespace, f"{LEGACY_JOB_NAME_LABEL}={name}")
        return pods

    # ---- helpers -------------------------------------------------------------------------

    def _list_items(
        self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any
    ) -> list[dict[str, Any]]:
        """All items of a list call, following ``continue`` tokens if the server pages."""
        out: list[dict[str, Any]] = []
        page_kwargs = dict(kwargs)
        while True:
            page = self._json(what, fn, *args, **page_kwargs) or {}
            out.extend(page.get("items") or [])
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return out
            page_kwargs["_continue"] = token


def _same_taint(stored: dict[str, Any], taint: Taint) -> bool:
    return stored.get("key") == taint.key and stored.get("effect") == taint.effect


def _job_pods(job_spec: dict[str, Any]) -> int:
    """Pods a Job runs at once: parallelism (default 1), capped by completions."""
    parallelism = job_spec.get("parallelism")
    parallelism = 1 if parallelism is None else int(parallelism)
    completions = job_spec.get("completions")
    if completions is not None:
        parallelism = min(parallelism, int(completions))
    return max(parallelism, 0)


def _pod_info(item: dict[str, Any]) -> PodInfo:
    metadata = item.get("metadata") or {}
    status = item.get("status") or {}
    return PodInfo(
        name=metadata.get("name", ""),
        node=(item.get("spec") or {}).get("nodeName") or None,
        phase=status.get("phase") or "Pending",
        labels=dict(metadata.get("labels") or {}),
        message=_pod_message(status),
    )


def _pod_message(status: dict[str, Any]) -> str | None:
    """Why a pod is where it is, if the cluster says: status message, scheduling, containers."""
    if status.get("message"):
        reason = status.get("reason")
        return f"{reason}: {status['message']}" if reason else status["message"]
    for cond in status.get("conditions") or ():
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            return _cond_message(cond)
    for cs in status.get("containerStatuses") or ():
        state = cs.get("state") or {}
        for key in ("waiting", "terminated"):
            detail = state.get(key) or {}
            if detail.get("reason") and detail.get("reason") not in ("Completed",):
                text = detail.get("message")
                return f"{cs.get('name')}: {detail['reason']}" + (f": {text}" if text else "")
    return None


def _cond_message(cond: dict[str, Any]) -> str | None:
    reason, message = cond.get("reason"), cond.get("message")
    if reason and message:
        return f"{reason}: {message}"
    return reason or message or None


def _ref(name: str, namespace: str | None) -> str:
    return f"{namespace}/{name}" if namespace else name


def _api_error(what: str, exc: Any, conn_id: str) -> KubeApiError:
    """The error a person reads for an ApiException: call, object, status, reason, message."""
    status = getattr(exc, "status", None) or 0
    reason = getattr(exc, "reason", None) or ""
    message = ""
    body = getattr(exc, "body", None)
    if body:
        try:
            payload = json.loads(body)
        except (TypeError, ValueError):
            payload = None
        if isinstance(payload, dict):
            reason = payload.get("reason") or reason
            message = payload.get("message") or ""
        else:
            text = body.decode("utf-8", "replace") if isinstance(body, bytes) else str(body)
            message = text.strip()[:300]
    text = f"{what} failed: HTTP {status} {reason}".rstrip()
    if message:
        text += f": {message}"
    if status in (401, 403):
        text += f"; check the credentials and RBAC of Airflow connection {conn_id!r}"
    elif status == 429 or status >= 500:
        text += "; the API server is throttling or failing, retry later"
    elif status == 0:
        text += f"; check the TLS settings of Airflow connection {conn_id!r}"
    cls = TransientKubeApiError if status == 429 or status >= 500 else KubeApiError
    return cls(text, status=status, reason=reason)
