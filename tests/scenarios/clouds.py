"""What a scenario needs from a backend, written once: ``CloudUnderTest`` is the small adapter
each backend's fixture yields (``tests/scenarios/gke.py``: the strict GCP fake;
``tests/scenarios/eks.py``: moto behind the AWS fake), with kmock as the cluster and
``CloudNodeController`` making a created pool's nodes Ready.

An adapter says which catalog region to use (the names and sizes below), reads what the cloud
RECEIVED (``writes``, ``deleted_pools``, ``pool_creates``) and what it still holds, and makes
the provider-specific checks a scenario calls at the point they apply (``assert_*``: what a
create call carried on this provider). The scenarios themselves live in
``tests/scenarios/test_onboarding_clouds.py`` and ``test_transition_clouds.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from gpufleet.services.nodes.drain import DrainSettings
from tests.support.cloud_cluster import CloudNodeController
from tests.support.kube_emulator import KubeEmulator

UNVALIDATED = {"key": "gpufleet.io/validation-pending", "value": "true", "effect": "NoSchedule"}
# as the cloud APIs spell the taint in a node pool / node group create
UNVALIDATED_CLOUD = {**UNVALIDATED, "effect": "NO_SCHEDULE"}
KUEUE = "kueue.x-k8s.io/v1beta1"
NAMESPACE = "ml-team-a"


@dataclass
class CloudUnderTest:
    """One backend's fake with kmock as its cluster. Class attributes: the catalog's names."""

    fake: Any
    kube: KubeEmulator
    nodes: CloudNodeController

    name: ClassVar[str]
    # onboarding: the example region and what it creates
    region: ClassVar[str]
    cluster: ClassVar[str]
    pool: ClassVar[str]
    filesystem: ClassVar[str]
    pool_size: ClassVar[int]
    pool_label: ClassVar[str]  # the provider's own node label naming the pool
    csi_driver: ClassVar[str]
    subdir_attribute: ClassVar[str]  # the CSI volume attribute naming a directory
    node_daemonsets: ClassVar[tuple[str, ...]]  # node add-ons that must run on unvalidated nodes
    # transition: the old pool in service, the planned one on a second reservation
    old: ClassVar[str]
    new: ClassVar[str]
    drain: ClassVar[DrainSettings]
    short_refusal: ClassVar[str]  # the preflight's refusal when the new reservation is short
    delete_polls: ClassVar[int]  # reads at least, after the first, before a delete is done

    # -- what the cloud received and holds ------------------------------------------------------
    def callback_errors(self) -> list[Any]:
        raise NotImplementedError

    def writes(self) -> list[Any]:
        """Requests since ``clear_log`` that create, change or delete something."""
        raise NotImplementedError

    def requests(self) -> list[Any]:
        raise NotImplementedError

    def clear_log(self) -> None:
        self.fake.clear_log()

    def deleted_pools(self) -> list[str]:
        """The pools a delete was sent for, in order (a delete of anything else as its path)."""
        raise NotImplementedError

    def pool_creates(self) -> int:
        raise NotImplementedError

    def assert_delete_confirmed(self, pool: str) -> None:
        """The cloud no longer holds ``pool``, and the retire rests on the cloud's own report."""
        raise NotImplementedError

    # -- provider-specific checks, called by the scenarios -------------------------------------
    def assert_onboarding_sent(self) -> None:
        """What the onboarding's create calls carried (pool, cluster, filesystem)."""
        raise NotImplementedError

    def assert_addons_stored(self, stored: set[tuple[str, str | None, str]]) -> None:
        """The provider's own add-on objects kmock holds."""
        raise NotImplementedError

    def assert_rerun_reads_only(self) -> None:
        """Beyond ``writes() == []``: how this provider's API log shows a read-only rerun."""

    def assert_volume_handles(self, handles: dict[str, str]) -> None:
        """namespace -> the CSI volume handle of its PV: the filesystem the DAG created."""
        raise NotImplementedError

    def assert_new_pool_sent(self) -> None:
        """What the transition's create of the new pool carried."""
        raise NotImplementedError

    def assert_reservation_read(self) -> None:
        """The preflight read the new pool's reservation."""
        raise NotImplementedError

    def slow_pool_delete(self, pool: str) -> None:
        """Make the next delete of ``pool`` take a while, as the provider's does."""
