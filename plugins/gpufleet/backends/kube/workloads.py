"""Workloads: the phase of a batch/v1 Job or a JobSet, with its pods (``WorkloadStatus``)."""

from __future__ import annotations

from typing import Any

from gpufleet.backends.base import PodInfo, WorkloadStatus
from gpufleet.backends.kube.client import cond_message, ref
from gpufleet.backends.kube.errors import KubeNotFound
from gpufleet.backends.kube.kinds import kind_info
from gpufleet.backends.kube.pods import KubePods
from gpufleet.domain.workloads import JOB_NAME_LABEL, JOBSET_NAME_LABEL, LEGACY_JOB_NAME_LABEL
from gpufleet.errors import BackendError


class KubeWorkloads(KubePods):
    """``workload_status`` for Jobs and JobSets (their pods are listed through ``KubePods``)."""

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
                f"({ref(name, namespace)})"
            )
        info = kind_info(kind)
        try:
            obj = self._read(info, name, namespace)
        except KubeNotFound:
            return WorkloadStatus(kind, name, namespace, "NotFound", message="not found")
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
            return WorkloadStatus(kind, name, namespace, "Failed", pods, cond_message(cond))
        if done_ok:
            cond = conditions.get("Completed") or conditions.get("Complete") or {}
            return WorkloadStatus(kind, name, namespace, "Succeeded", pods, cond_message(cond))
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


def _job_pods(job_spec: dict[str, Any]) -> int:
    """Pods a Job runs at once: parallelism (default 1), capped by completions."""
    parallelism = job_spec.get("parallelism")
    parallelism = 1 if parallelism is None else int(parallelism)
    completions = job_spec.get("completions")
    if completions is not None:
        parallelism = min(parallelism, int(completions))
    return max(parallelism, 0)
