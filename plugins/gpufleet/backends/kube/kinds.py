"""Where each kind gpufleet applies lives in the Kubernetes API (group, version, plural, scope).

Every call on an object goes to the path these give (``KindInfo.path``) through the official
client's ``ApiClient.call_api`` (``client.KubeApi``), so a kind needs a row here and nothing
else: no typed-client method, which the official client lacks for some of them (custom objects,
``MutatingAdmissionPolicy`` in some versions). Built-in kinds accept the versions listed; a
custom kind (a CRD's, ``custom=True``) accepts any version of its group, since the versions a
cluster serves follow the controller release installed there.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from urllib.parse import quote

from gpufleet.errors import BackendError


@dataclass(frozen=True)
class KindInfo:
    """Where a kind lives in the API: group/version/plural and whether it is namespaced."""

    kind: str
    group: str  # "" for the core group
    version: str  # the version used when a call names none (delete, workload_status)
    plural: str
    namespaced: bool
    custom: bool = False  # a custom resource: any version of the group is accepted
    other_versions: tuple[str, ...] = ()  # further versions a built-in kind is served at

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str | None = None, name: str | None = None) -> str:
        """The REST path of the collection, or of object ``name`` when given."""
        prefix = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced:
            if not namespace:
                raise BackendError(f"{self.kind} is namespaced: a namespace is needed")
            prefix += f"/namespaces/{quote(namespace, safe='')}"
        path = f"{prefix}/{self.plural}"
        return f"{path}/{quote(name, safe=':@')}" if name else path


def _core(kind: str, plural: str, namespaced: bool) -> KindInfo:
    return KindInfo(kind, "", "v1", plural, namespaced)


_RBAC = "rbac.authorization.k8s.io"
_ADMISSION = "admissionregistration.k8s.io"
_KUEUE = "kueue.x-k8s.io"
_GKE_NET = "networking.gke.io"

# The kinds gpufleet applies: workloads, the Lustre volumes, and the add-ons region onboarding
# installs (the Kueue and JobSet releases, device plugins, the FSx CSI driver, network objects,
# the admission policy).
KINDS: dict[str, KindInfo] = {
    k.kind: k
    for k in (
        # core
        _core("Namespace", "namespaces", False),
        _core("ServiceAccount", "serviceaccounts", True),
        _core("ConfigMap", "configmaps", True),
        _core("Secret", "secrets", True),
        _core("Service", "services", True),
        _core("Pod", "pods", True),
        _core("PersistentVolume", "persistentvolumes", False),
        _core("PersistentVolumeClaim", "persistentvolumeclaims", True),
        _core("ResourceQuota", "resourcequotas", True),
        _core("LimitRange", "limitranges", True),
        # workloads
        KindInfo("DaemonSet", "apps", "v1", "daemonsets", True),
        KindInfo("Deployment", "apps", "v1", "deployments", True),
        KindInfo("StatefulSet", "apps", "v1", "statefulsets", True),
        KindInfo("Job", "batch", "v1", "jobs", True),
        KindInfo("PodDisruptionBudget", "policy", "v1", "poddisruptionbudgets", True),
        KindInfo("PriorityClass", "scheduling.k8s.io", "v1", "priorityclasses", False),
        # RBAC
        KindInfo("ClusterRole", _RBAC, "v1", "clusterroles", False),
        KindInfo("ClusterRoleBinding", _RBAC, "v1", "clusterrolebindings", False),
        KindInfo("Role", _RBAC, "v1", "roles", True),
        KindInfo("RoleBinding", _RBAC, "v1", "rolebindings", True),
        # storage
        KindInfo("CSIDriver", "storage.k8s.io", "v1", "csidrivers", False),
        KindInfo("StorageClass", "storage.k8s.io", "v1", "storageclasses", False),
        # API extension and admission
        KindInfo(
            "CustomResourceDefinition",
            "apiextensions.k8s.io",
            "v1",
            "customresourcedefinitions",
            False,
        ),
        KindInfo("APIService", "apiregistration.k8s.io", "v1", "apiservices", False),
        KindInfo("FlowSchema", "flowcontrol.apiserver.k8s.io", "v1", "flowschemas", False),
        KindInfo(
            "PriorityLevelConfiguration",
            "flowcontrol.apiserver.k8s.io",
            "v1",
            "prioritylevelconfigurations",
            False,
        ),
        KindInfo(
            "ValidatingWebhookConfiguration",
            _ADMISSION,
            "v1",
            "validatingwebhookconfigurations",
            False,
        ),
        KindInfo(
            "MutatingWebhookConfiguration", _ADMISSION, "v1", "mutatingwebhookconfigurations", False
        ),
        KindInfo(
            "ValidatingAdmissionPolicy", _ADMISSION, "v1", "validatingadmissionpolicies", False
        ),
        KindInfo(
            "ValidatingAdmissionPolicyBinding",
            _ADMISSION,
            "v1",
            "validatingadmissionpolicybindings",
            False,
        ),
        # beta from Kubernetes 1.34 (feature gate), v1 from 1.36: the manifest says which
        KindInfo(
            "MutatingAdmissionPolicy",
            _ADMISSION,
            "v1beta1",
            "mutatingadmissionpolicies",
            False,
            other_versions=("v1", "v1alpha1"),
        ),
        KindInfo(
            "MutatingAdmissionPolicyBinding",
            _ADMISSION,
            "v1beta1",
            "mutatingadmissionpolicybindings",
            False,
            other_versions=("v1", "v1alpha1"),
        ),
        # custom objects
        KindInfo("JobSet", "jobset.x-k8s.io", "v1alpha2", "jobsets", True, custom=True),
        KindInfo("ResourceFlavor", _KUEUE, "v1beta1", "resourceflavors", False, custom=True),
        KindInfo("ClusterQueue", _KUEUE, "v1beta1", "clusterqueues", False, custom=True),
        KindInfo("LocalQueue", _KUEUE, "v1beta1", "localqueues", True, custom=True),
        KindInfo("Cohort", _KUEUE, "v1beta1", "cohorts", False, custom=True),
        KindInfo("Topology", _KUEUE, "v1beta1", "topologies", False, custom=True),
        KindInfo(
            "WorkloadPriorityClass",
            _KUEUE,
            "v1beta1",
            "workloadpriorityclasses",
            False,
            custom=True,
        ),
        KindInfo("Network", _GKE_NET, "v1", "networks", False, custom=True),
        KindInfo("GKENetworkParamSet", _GKE_NET, "v1", "gkenetworkparamsets", False, custom=True),
    )
}


def kind_info(kind: str, api_version: str | None = None) -> KindInfo:
    """The API location of ``kind`` at ``api_version`` (the table's version when None)."""
    info = KINDS.get(kind)
    if info is None:
        raise BackendError(
            f"cannot handle Kubernetes kind {kind!r}: gpufleet's cluster backend knows "
            f"{', '.join(sorted(KINDS))}. Check the manifest's 'kind', or add the kind to "
            "gpufleet.backends.kube.kinds.KINDS."
        )
    if not api_version or api_version == info.api_version:
        return info
    group, _, version = api_version.rpartition("/")
    if group == info.group and version and (info.custom or version in info.other_versions):
        return replace(info, version=version)
    served = [info.api_version] + [
        f"{info.group}/{v}" if info.group else v for v in info.other_versions
    ]
    raise BackendError(
        f"{kind} has apiVersion {' or '.join(served)}, not {api_version!r}: fix the "
        "manifest's 'apiVersion'"
    )
