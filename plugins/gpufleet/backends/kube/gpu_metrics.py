"""A node's GPU metrics: what NVIDIA's dcgm-exporter serves on the node, read through the API
server's pod proxy (``gpu_metrics``), so nothing needs a route to the node's pod network.

The exporter runs as a DaemonSet, one pod per GPU node, listening on port 9400 and serving
``/metrics`` (Prometheus text). It is found by its pod labels in any namespace, on the node
(``spec.nodeName``): the GPU operator's ``app=nvidia-dcgm-exporter`` (NVIDIA/gpu-operator
``assets/state-dcgm-exporter/0800_daemonset.yaml``), else the standalone Helm chart's
``app.kubernetes.io/name=dcgm-exporter`` (NVIDIA/dcgm-exporter ``deployment/``). The read is
``GET /api/v1/namespaces/<ns>/pods/<pod>:9400/proxy/metrics`` (the official client's
``connect_get_namespaced_pod_proxy_with_path``): the caller needs ``get`` on ``pods/proxy``.

The event path's interval scrape (docs/events.md) lists every exporter pod of the cluster once
(``dcgm_exporters``: one list per selector, no node filter) and reads each through the same
proxy (``exporter_metrics``).
"""

from __future__ import annotations

from gpufleet.backends.base import PodInfo
from gpufleet.backends.kube.client import KubeApi
from gpufleet.backends.kube.pods import pod_info
from gpufleet.errors import BackendError

DCGM_EXPORTER_SELECTORS = ("app=nvidia-dcgm-exporter", "app.kubernetes.io/name=dcgm-exporter")
DCGM_EXPORTER_PORT = 9400


class KubeGpuMetrics(KubeApi):
    """``gpu_metrics``: dcgm-exporter's metrics of one node."""

    dcgm_exporter_selectors: tuple[str, ...] = DCGM_EXPORTER_SELECTORS

    def gpu_metrics(self, node: str) -> str | None:
        """The ``/metrics`` text of the dcgm-exporter pod on ``node``; None when no exporter
        pod runs there. A pod that is there but not running is a BackendError naming it."""
        pod = self._exporter_pod(node)
        if pod is None:
            return None
        return self.exporter_metrics(pod)

    def exporter_metrics(self, pod: PodInfo) -> str:
        """The ``/metrics`` text of one exporter pod; a pod that is not running is a
        BackendError naming it."""
        where = f"dcgm-exporter pod {pod.namespace}/{pod.name} on node {pod.node}"
        if pod.phase != "Running":
            why = f": {pod.message}" if pod.message else ""
            raise BackendError(f"{where} is {pod.phase}{why}: its metrics cannot be read")
        data = self._raw(
            f"read the metrics of {where} (port {DCGM_EXPORTER_PORT})",
            self.core.connect_get_namespaced_pod_proxy_with_path,
            f"{pod.name}:{DCGM_EXPORTER_PORT}",
            pod.namespace,
            "metrics",
        )
        return data.decode("utf-8", errors="replace") if data else ""

    def dcgm_exporters(self) -> dict[str, PodInfo]:
        """Every exporter pod of the cluster by node (a running one first), from one list
        per selector: the pods of the first selector that finds any (one DaemonSet runs)."""
        for selector in self.dcgm_exporter_selectors:
            items = self._list_items(
                f"list dcgm-exporter pods ({selector})",
                self.core.list_pod_for_all_namespaces,
                label_selector=selector,
            )
            pods = [p for p in map(pod_info, items) if p.node and not p.finished]
            if not pods:
                continue
            out: dict[str, PodInfo] = {}
            for pod in sorted(
                pods, key=lambda p: (p.phase != "Running", p.namespace or "", p.name)
            ):
                out.setdefault(str(pod.node), pod)
            return out
        return {}

    def _exporter_pod(self, node: str) -> PodInfo | None:
        """The exporter's pod on ``node`` (a running one first), by the first selector that
        finds one."""
        for selector in self.dcgm_exporter_selectors:
            items = self._list_items(
                f"list dcgm-exporter pods ({selector}) on node {node}",
                self.core.list_pod_for_all_namespaces,
                label_selector=selector,
                field_selector=f"spec.nodeName={node}",
            )
            pods = [p for p in map(pod_info, items) if p.node == node and not p.finished]
            if pods:
                return min(pods, key=lambda p: (p.phase != "Running", p.namespace or "", p.name))
        return None
