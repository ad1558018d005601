"""Pods: list them (as ``PodInfo``, by selector or by node), evict one through the Eviction
API, read its logs."""

from __future__ import annotations

import logging
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
    return PodInfo(
        name=metadata.get("name", ""),
        node=(item.get("spec") or {}).get("nodeName") or None,
        phase=status.get("phase") or "Pending",
        labels=dict(metadata.get("labels") or {}),
        message=_pod_message(status),
        namespace=metadata.get("namespace") or None,
        owner_kind=_owner_kind(metadata),
    )


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
