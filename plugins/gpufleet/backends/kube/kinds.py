"""Where each kind gpufleet creates lives in the Kubernetes API (group, version, plural, scope),
and which official-client API serves it."""

from __future__ import annotations

from dataclasses import dataclass

from gpufleet.errors import BackendError


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
            "gpufleet.backends.kube.kinds.KINDS."
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
