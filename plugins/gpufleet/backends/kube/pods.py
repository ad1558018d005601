"""Pods: list them (as ``PodInfo``, by selector or by node), evict one through the Eviction
API, read its logs."""

from __future__ import annotations

import logging
import re
from datetime import UTC, datetime
from typing import Any

from gpufleet.backends.base import PodInfo
from gpufleet.backends.kube.client import KubeApi, cond_message
from gpufleet.backends.kube.errors import KubeNotFound, KubeTooManyRequests

log = logging.getLogger(__name__)


class KubePods(KubeApi):
    """Pod listing, eviction and logs."""

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
        return sorted((pod_info(item) for item in items), key=lambda p: p.name)

    def pods_on_node(self, node: str) -> list[PodInfo]:
        """Unfinished pods bound to ``node`` in every namespace (DaemonSet pods included: see
        ``PodInfo.owner_kind``), sorted by namespace and name.

        One ``list_pod_for_all_namespaces`` with the field selector ``spec.nodeName=<node>``
        (a field the API server indexes for pods) plus ``status.phase`` exclusions; both are
        checked again here, which keeps the answer right against servers that ignore them.
        """
        items = self._list_items(
            f"list pods on node {node} (all namespaces)",
            self.core.list_pod_for_all_namespaces,
            field_selector=(f"spec.nodeName={node},status.phase!=Succeeded,status.phase!=Failed"),
        )
        pods = [pod_info(item) for item in items]
        pods = [p for p in pods if p.node == node and not p.finished]
        return sorted(pods, key=lambda p: (p.namespace or "", p.name))

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
        except KubeTooManyRequests:
            log.info("eviction of pod %s/%s refused for now (PodDisruptionBudget)", namespace, pod)
            return False
        except KubeNotFound:
            return True
        log.info("evicted pod %s/%s", namespace, pod)
        return True

    def image_pulls(self, namespace: str) -> dict[str, float]:
        """Seconds each pod of ``namespace`` spent pulling its images, from the kubelet's
        ``Pulled`` events (``pulled_seconds``; a pod's pulls add up; 0 for images already
        present): one list call a round, not one per pod. Events expire (an hour by default),
        so read them when the round is collected."""
        items = self._list_items(
            f"list Pulled events in namespace {namespace}",
            self.core.list_namespaced_event,
            namespace,
            field_selector="reason=Pulled,involvedObject.kind=Pod",
        )
        out: dict[str, float] = {}
        for item in items:
            seconds = pulled_seconds(str(item.get("message") or ""))
            pod = (item.get("involvedObject") or {}).get("name")
            if seconds is not None and pod:
                out[pod] = out.get(pod, 0.0) + seconds
        return out

    def pod_logs(self, pod: str, namespace: str, container: str | None = None) -> str:
        kwargs: dict[str, Any] = {}
        if container:
            kwargs["container"] = container
        where = f"pod {namespace}/{pod}" + (f" container {container}" if container else "")
        data = self._raw(
            f"read logs of {where}", self.core.read_namespaced_pod_log, pod, namespace, **kwargs
        )
        return data.decode("utf-8", errors="replace") if data else ""


def pod_info(item: dict[str, Any]) -> PodInfo:
    metadata = item.get("metadata") or {}
    status = item.get("status") or {}
    times, life = _container_times(status), _life_times(item)
    return PodInfo(
        name=metadata.get("name", ""),
        node=(item.get("spec") or {}).get("nodeName") or None,
        phase=status.get("phase") or "Pending",
        labels=dict(metadata.get("labels") or {}),
        message=_pod_message(status),
        namespace=metadata.get("namespace") or None,
        owner_kind=_owner_kind(metadata),
        started_at=times["started_at"],
        finished_at=times["finished_at"],
        created_at=life["created_at"],
        scheduled_at=life["scheduled_at"],
        main_finished_at=life["main_finished_at"],
        init_seconds=_init_seconds(item),
    )


def _life_times(item: dict[str, Any]) -> dict[str, datetime | None]:
    """The rest of a pod's life (``domain.stages``): ``created_at`` (its creation timestamp),
    ``scheduled_at`` (its ``PodScheduled`` condition's last transition, once True: bound to its
    node), ``main_finished_at`` (its main container's ``terminated.finishedAt``: the first of
    ``spec.containers``, whatever order the statuses come in)."""
    metadata = item.get("metadata") or {}
    status = item.get("status") or {}
    scheduled = None
    for cond in status.get("conditions") or ():
        if not isinstance(cond, dict) or cond.get("type") != "PodScheduled":
            continue
        if cond.get("status") == "True":
            scheduled = _timestamp(cond.get("lastTransitionTime"))
    containers = (item.get("spec") or {}).get("containers") or [{}]
    main = containers[0].get("name") if isinstance(containers[0], dict) else None
    main_end = None
    for cs in status.get("containerStatuses") or ():
        if isinstance(cs, dict) and cs.get("name") == main:
            terminated = (cs.get("state") or {}).get("terminated") or {}
            main_end = _timestamp(terminated.get("finishedAt"))
    return {
        "created_at": _timestamp(metadata.get("creationTimestamp")),
        "scheduled_at": scheduled,
        "main_finished_at": main_end,
    }


def _init_seconds(item: dict[str, Any]) -> dict[str, float]:
    """Seconds each init container run as a step ran (``terminated.finishedAt - startedAt`` of
    its ``initContainerStatuses`` entry), in the order of ``spec.initContainers`` (the order
    the kubelet runs them): every init container but a native sidecar (``restartPolicy:
    Always``: it runs beside the main container), once it has terminated, whatever its exit
    code. A step whose times are absent or unreadable is left out: a cost figure, never a
    verdict."""
    spec = item.get("spec") or {}
    steps = [
        c.get("name")
        for c in spec.get("initContainers") or ()
        if isinstance(c, dict) and c.get("restartPolicy") != "Always"
    ]
    ran: dict[str, float] = {}
    for cs in (item.get("status") or {}).get("initContainerStatuses") or ():
        if not isinstance(cs, dict):
            continue
        terminated = (cs.get("state") or {}).get("terminated") or {}
        start = _timestamp(terminated.get("startedAt"))
        end = _timestamp(terminated.get("finishedAt"))
        if start is not None and end is not None:
            ran[str(cs.get("name"))] = max((end - start).total_seconds(), 0.0)
    return {name: ran[name] for name in steps if name in ran}


# the kubelet's Pulled event (pkg/kubelet/images/image_manager.go): ``Successfully pulled image
# "x" in 4.043s (4.043s including waiting). Image size: 23003038 bytes.``, the duration as Go
# prints one (``717ms``, ``1m0.809s``, ``1.315633737s``); older kubelets stop after ``in 7.46s``;
# ``Container image "x" already present on machine`` when nothing was pulled
_PULLED = re.compile(
    r'Successfully pulled image "[^"]*" in ((?:\d+(?:\.\d+)?(?:h|ms|us|µs|ns|m|s))+)'
)
_PRESENT = re.compile(r'Container image "[^"]*" already present on machine')
_UNIT_S = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
_PART = re.compile(r"(\d+(?:\.\d+)?)(h|ms|us|µs|ns|m|s)")


def pulled_seconds(message: str) -> float | None:
    """Seconds the kubelet's ``Pulled`` event says the pull took (0.0 for an image already
    present on the machine); None for any other message."""
    if _PRESENT.search(message):
        return 0.0
    m = _PULLED.search(message)
    if m is None:
        return None
    return sum(float(n) * _UNIT_S[unit] for n, unit in _PART.findall(m.group(1)))


def _container_times(status: dict[str, Any]) -> dict[str, datetime | None]:
    """``started_at``: the earliest ``startedAt`` of the pod's containers, init containers
    included (a native sidecar such as ``nccl-log`` is one), running or terminated;
    ``finished_at``: the latest ``finishedAt``, once every one of them has terminated (a
    sidecar still running holds the node too). Unreadable timestamps count as absent: the
    times are a cost figure, never a verdict."""
    starts: list[datetime] = []
    ends: list[datetime] = []
    statuses = [
        cs
        for key in ("initContainerStatuses", "containerStatuses")
        for cs in status.get(key) or ()
        if isinstance(cs, dict)
    ]
    for cs in statuses:
        state = cs.get("state") or {}
        for key in ("running", "terminated"):
            start = _timestamp((state.get(key) or {}).get("startedAt"))
            if start is not None:
                starts.append(start)
        end = _timestamp((state.get("terminated") or {}).get("finishedAt"))
        if end is not None:
            ends.append(end)
    done = bool(statuses) and len(ends) == len(statuses)
    return {
        "started_at": min(starts) if starts else None,
        "finished_at": max(ends) if done and starts else None,
    }


def _timestamp(value: Any) -> datetime | None:
    """An RFC 3339 time as the API server writes it (``2026-11-30T02:00:00Z``), or a datetime
    (the client's deserialised objects), in UTC; None when absent or unreadable."""
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _owner_kind(metadata: dict[str, Any]) -> str | None:
    """Kind of the pod's controller: the owner reference marked ``controller: true``, else
    the first one (clients that omit the flag); None for a bare pod."""
    owners = [o for o in metadata.get("ownerReferences") or () if isinstance(o, dict)]
    owner = next((o for o in owners if o.get("controller")), owners[0] if owners else None)
    return (owner or {}).get("kind") or None


def _pod_message(status: dict[str, Any]) -> str | None:
    """Why a pod is where it is, if the cluster says: status message, scheduling, containers."""
    if status.get("message"):
        reason = status.get("reason")
        return f"{reason}: {status['message']}" if reason else status["message"]
    for cond in status.get("conditions") or ():
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            return cond_message(cond)
    for cs in status.get("containerStatuses") or ():
        state = cs.get("state") or {}
        for key in ("waiting", "terminated"):
            detail = state.get(key) or {}
            if detail.get("reason") and detail.get("reason") not in ("Completed",):
                text = detail.get("message")
                return f"{cs.get('name')}: {detail['reason']}" + (f": {text}" if text else "")
    return None
