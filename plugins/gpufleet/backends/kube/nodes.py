"""Nodes: list them by pool with the training workloads on each, cordon, taint, label."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import tenacity

from gpufleet.backends.base import NodeInfo, Taint
from gpufleet.backends.kube.client import KubeApi
from gpufleet.backends.kube.errors import KubeConflict
from gpufleet.backends.kube.node_objects import node_info
from gpufleet.domain.workloads import (
    JOB_NAME_LABEL,
    JOBSET_NAME_LABEL,
    LEGACY_JOB_NAME_LABEL,
    POOL_LABEL,
    WORKLOAD_LABEL,
)

log = logging.getLogger(__name__)

# Labels that name the workload a pod belongs to, most specific first.
WORKLOAD_NAME_LABELS = (JOBSET_NAME_LABEL, JOB_NAME_LABEL, LEGACY_JOB_NAME_LABEL)
VALIDATION_WORKLOAD = "validation"

TAINT_PATCH_ATTEMPTS = 3  # read-modify-write of node taints, retried on a 409 resourceVersion clash
_MERGE_PATCH = "application/merge-patch+json"

TaintChange = Callable[[list[dict[str, Any]]], list[dict[str, Any]]]


class KubeNodes(KubeApi):
    """Node listing and node changes. A node's pool is the value of the first of
    ``pool_label_keys`` it carries."""

    pool_label_keys: tuple[str, ...] = (POOL_LABEL,)

    def list_nodes(self, pool: str | None = None) -> list[NodeInfo]:
        """Nodes of ``pool`` (all nodes when None), with the training workloads on each.

        With a pool given, one labelled list per key of ``pool_label_keys`` is made and only
        nodes whose pool is ``pool`` kept. Workloads come from one cluster-wide list of
        running pods.
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
        """A Node object read (``node_objects.node_info``): labels, taints, cordon,
        conditions, uid, boot id, creation time."""
        return node_info(item, self.pool_label_keys)

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

    def _update_taints(self, node: str, change: TaintChange, what: str) -> None:
        # Taints are a list without a merge key, so this is read-modify-write; the patch carries
        # the resourceVersion it was computed from, and a 409 (someone else changed the node in
        # between) re-reads and tries again, at once: optimistic concurrency, not the retry
        # rule of backends/retry.py (which never retries a 409).
        on_conflict = tenacity.Retrying(
            retry=tenacity.retry_if_exception_type(KubeConflict),
            stop=tenacity.stop_after_attempt(TAINT_PATCH_ATTEMPTS),
            reraise=True,
        )
        on_conflict(self._read_modify_write_taints, node, change, what)

    def _read_modify_write_taints(self, node: str, change: TaintChange, what: str) -> None:
        current = self._json(f"read node {node}", self.core.read_node, node)
        taints = list((current.get("spec") or {}).get("taints") or [])
        desired = change(taints)
        if desired == taints:
            return
        body: dict[str, Any] = {"spec": {"taints": desired}}
        version = (current.get("metadata") or {}).get("resourceVersion")
        if version:
            body["metadata"] = {"resourceVersion": version}
        self._patch_node(node, body, what)
        log.info("%s on node %s", what, node)

    def set_labels(self, node: str, labels: dict[str, str | None]) -> None:
        """Set node labels; a None value removes the label (JSON merge patch null)."""
        if not labels:
            return
        self._patch_node(node, {"metadata": {"labels": dict(labels)}}, "set labels")
        log.info("labels %s on node %s", labels, node)


def _same_taint(stored: dict[str, Any], taint: Taint) -> bool:
    return stored.get("key") == taint.key and stored.get("effect") == taint.effect
