"""The cloud's node controller for end-to-end tests on the cloud fakes with kmock as the cluster.

A real cloud registers a node pool's machines with the cluster's API server once the pool is
created; the fakes only record the create, and kmock has no controllers. ``CloudNodeController``
listens to the fakes (``GcpFake.on_node_pool_created``, ``AwsFake.on_nodegroup_created``) and
registers each new pool's nodes in a ``KubeEmulator`` as the provider would: Ready, labelled
with the provider's native pool label (GKE ``cloud.google.com/gke-nodepool``, EKS
``eks.amazonaws.com/nodegroup``), the labels the create call carried (``gpufleet.io/pool``) and
its taints, with the cloud API's effect names turned into Kubernetes' (``NO_SCHEDULE`` ->
``NoSchedule``). Only what the create call sent ends up on the nodes, so a pool created without
the ``unvalidated`` taint shows up untainted.

It also reads back what the emulator received: ``writes()`` (every non-GET request since
``mark()``), for "a second run sends no create or patch".
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from tests.support.kube_emulator import KubeEmulator

GKE_POOL_LABEL = "cloud.google.com/gke-nodepool"
EKS_POOL_LABEL = "eks.amazonaws.com/nodegroup"

# The cloud APIs' taint effects (GKE NodeTaint.Effect, EKS Taint.effect) -> Kubernetes'.
EFFECTS = {
    "NO_SCHEDULE": "NoSchedule",
    "PREFER_NO_SCHEDULE": "PreferNoSchedule",
    "NO_EXECUTE": "NoExecute",
}


def kube_taints(taints: Any) -> list[dict[str, str]]:
    """The taints a create call carried, as the kubelet registers them on the node."""
    out = []
    for t in taints or ():
        effect = str(t.get("effect") or "")
        taint = {"key": t["key"], "effect": EFFECTS.get(effect, effect)}
        if t.get("value") not in (None, ""):
            taint["value"] = str(t["value"])
        out.append(taint)
    return out


@dataclass
class CloudNodeController:
    """Registers created pools' nodes in ``kube``; ``nodes`` maps pool -> node names."""

    kube: KubeEmulator
    nodes: dict[str, list[str]] = field(default_factory=dict)
    errors: list[BaseException] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _mark: int = 0

    # -- the providers' callbacks ------------------------------------------------------------
    def gke_node_pool_created(self, cluster: str, pool: dict[str, Any]) -> None:
        """``GcpFake`` callback: ``pool`` is the stored camelCase NodePool."""
        config = pool.get("config") or {}
        name = pool["name"]
        count = int(pool.get("initialNodeCount") or 0)
        labels = {
            GKE_POOL_LABEL: name,
            "node.kubernetes.io/instance-type": str(config.get("machineType") or ""),
            **(config.get("labels") or {}),
        }
        zone = (pool.get("locations") or [""])[0]
        if zone:
            labels["topology.kubernetes.io/zone"] = zone
        self._register(
            name,
            [f"gke-{cluster}-{name}-{i:04d}" for i in range(count)],
            labels,
            kube_taints(config.get("taints")),
        )

    def eks_nodegroup_created(self, event: Any) -> None:
        """``AwsFake`` callback: ``event`` is a ``NodegroupCreated``."""
        with self._lock:  # EC2 never gives two instances one private IP: continue the count
            start = sum(len(names) for names in self.nodes.values())
        labels = {EKS_POOL_LABEL: event.name, **dict(event.labels)}
        if event.instance_types:
            labels["node.kubernetes.io/instance-type"] = event.instance_types[0]
        self._register(
            event.name,
            [
                f"ip-10-0-{i // 250}-{i % 250 + 4}.ec2.internal"
                for i in range(start, start + event.desired_size)
            ],
            labels,
            kube_taints(event.taints),
        )

    def _register(
        self, pool: str, names: list[str], labels: dict[str, str], taints: list[dict[str, str]]
    ) -> None:
        try:
            for node in names:
                # seed_node puts gpufleet.io/pool itself when given a pool; labels carry it
                # only when the create call did, so pass it through ``labels`` alone
                self.kube.seed_node(node, labels=labels, taints=taints or None)
            with self._lock:
                self.nodes.setdefault(pool, []).extend(names)
        except BaseException as exc:  # the fakes swallow callback errors: keep them here
            self.errors.append(exc)
            raise

    # -- what the emulator received ----------------------------------------------------------
    def mark(self) -> None:
        """Count the emulator's requests from here."""
        self._mark = len(self.kube.requests())

    def requests(self) -> list[tuple[str, str]]:
        """``(method, path)`` of every request since ``mark()``."""
        return [
            (str(getattr(r.method, "value", r.method)).upper(), r.url.path)
            for r in self.kube.requests()[self._mark :]
        ]

    def writes(self) -> list[tuple[str, str]]:
        """Requests since ``mark()`` that create, patch, replace or delete something."""
        return [(m, p) for m, p in self.requests() if m != "GET"]

    def node(self, name: str) -> dict[str, Any]:
        return self.kube.stored("v1/nodes", None, name) or {}


def attach_gke(fake: Any, kube: KubeEmulator) -> CloudNodeController:
    """A controller registered on a ``GcpFake``."""
    controller = CloudNodeController(kube)
    fake.on_node_pool_created(controller.gke_node_pool_created)
    return controller


def attach_eks(fake: Any, kube: KubeEmulator) -> CloudNodeController:
    """A controller registered on an ``AwsFake``."""
    controller = CloudNodeController(kube)
    fake.on_nodegroup_created(controller.eks_nodegroup_created)
    return controller


def write_catalog(example: Any, folder: Any) -> Any:
    """Copy a catalog example region file into ``folder`` with each cluster's
    ``connections.kubernetes`` removed, so the cluster is reached with the credentials the cloud
    backend obtains (as for a cluster the DAG has just created). Returns the file's path."""
    from pathlib import Path

    import yaml

    data = yaml.safe_load(Path(example).read_text())
    for region in data["regions"]:
        for cluster in region["clusters"]:
            (cluster.get("connections") or {}).pop("kubernetes", None)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / Path(example).name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def finish_compute_operations_at_once(fake: Any) -> None:
    """Make a ``GcpFake``'s compute operations (network and subnet inserts) complete as they
    start, while container and lustre operations still run for ``operation_polls`` reads.

    The GKE backend waits on compute operations itself, sleeping its ``poll_interval`` (2 s,
    not configurable through ``cloud_backend``) between reads: with ten inserts per region that
    is 40 s of sleep per run. Cluster, node pool and Lustre operations are the ones the DAG
    defers on, and they keep running, so the triggers are still exercised."""
    state = fake.state
    start = state.start

    def start_compute_done(api: str, scope: Any, target: str, kind: str, finish: Any) -> Any:
        op = start(api, scope, target, kind, finish)
        if api == "compute" and not op.done:
            state._complete(op)
        return op

    state.start = start_compute_done


def tolerates(tolerations: Any, taint: dict[str, str]) -> bool:
    """Whether a pod with ``tolerations`` may run on a node with ``taint``, as the scheduler
    and the DaemonSet controller read them (an empty key with Exists tolerates every taint; an
    empty effect matches every effect; the operator defaults to Equal)."""
    for t in tolerations or ():
        if t.get("effect") and t["effect"] != taint["effect"]:
            continue
        if t.get("operator", "Equal") == "Exists":
            if not t.get("key") or t["key"] == taint["key"]:
                return True
        elif t.get("key") == taint["key"] and (t.get("value") or "") == (taint.get("value") or ""):
            return True
    return False
