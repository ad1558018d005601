"""The checks of rendered manifests that neither kubernetes-validate nor the CRD schemas make.

The enums kubernetes-validate leaves open that we rely on (``restartPolicy``,
``completionMode``, toleration/taint effects and operators, node selector operators,
``imagePullPolicy``), object names and label syntax, cluster-scoped kinds without a namespace,
JobSet's admission rules (unique replicatedJob names, generated Job and pod names within 63
characters, policy targets that exist) and Kueue's (a ClusterQueue flavor lists its
coveredResources in order). Pure: rules over the dict, no files. Used by
:mod:`tests.support.schemas`, which adds the schema checks.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gpufleet.domain.names import DNS1035_LABEL, DNS1123_SUBDOMAIN, LABEL_NAME, LABEL_VALUE

CLUSTER_SCOPED = frozenset(
    {
        "Namespace",
        "Node",
        "PersistentVolume",
        "PriorityClass",
        "StorageClass",
        "ResourceFlavor",
        "ClusterQueue",
        "Topology",
        "Network",
        "GKENetworkParamSet",
        "CustomResourceDefinition",
        "CSIDriver",
        "ClusterRole",
        "ClusterRoleBinding",
        "MutatingAdmissionPolicy",
        "MutatingAdmissionPolicyBinding",
    }
)

RESTART_POLICIES = ("Always", "OnFailure", "Never")
JOB_RESTART_POLICIES = ("Never", "OnFailure")
COMPLETION_MODES = ("NonIndexed", "Indexed")
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
TOLERATION_OPERATORS = ("Exists", "Equal")
NODE_SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
LABEL_SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")
PULL_POLICIES = ("Always", "IfNotPresent", "Never")

# JobSet names its pods <jobset>-<rjob>-<job index>-<pod index>-<5 random>
_POD_SUFFIX = "-abcde"


# --- formatting -------------------------------------------------------------------------------


def fmt_path(path: Iterable[Any]) -> str:
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "(root)"


def problem(path: Iterable[Any], message: str) -> str:
    return f"{fmt_path(path)}: {message}"


# --- the rules --------------------------------------------------------------------------------


def _enum(value: Any, allowed: tuple[str, ...], path: list[Any], what: str) -> list[str]:
    if value is None or value in allowed:
        return []
    return [problem(path, f"{value!r} is not one of {', '.join(allowed)} ({what})")]


def _label_problems(labels: Any, path: list[Any]) -> list[str]:
    if not isinstance(labels, Mapping):
        return []
    out = []
    for key, value in labels.items():
        prefix, _, name = str(key).rpartition("/")
        if (prefix and (len(prefix) > 253 or not DNS1123_SUBDOMAIN.match(prefix))) or (
            len(name) > 63 or not LABEL_NAME.match(name)
        ):
            out.append(problem([*path, key], "is not a valid label key"))
        if isinstance(value, str) and (len(value) > 63 or not LABEL_VALUE.match(value)):
            out.append(
                problem(
                    [*path, key],
                    f"label value {value!r} is not valid (at most 63 characters: letters, "
                    "digits, '-', '_', '.', starting and ending alphanumeric)",
                )
            )
    return out


def _meta_problems(obj: Mapping[str, Any], path: list[Any]) -> list[str]:
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping):
        return []
    out = _label_problems(meta.get("labels"), [*path, "metadata", "labels"])
    name = meta.get("name")
    if path == [] and isinstance(name, str):
        rule = DNS1035_LABEL if obj.get("kind") in ("JobSet", "Service") else DNS1123_SUBDOMAIN
        limit = 63 if rule is DNS1035_LABEL else 253
        if len(name) > limit or not rule.match(name):
            kind = "DNS-1035 label" if rule is DNS1035_LABEL else "DNS-1123 subdomain"
            out.append(problem(["metadata", "name"], f"{name!r} is not a {kind}"))
    if path == [] and obj.get("kind") in CLUSTER_SCOPED and meta.get("namespace"):
        out.append(
            problem(
                ["metadata", "namespace"],
                f"{obj.get('kind')} is cluster-scoped and takes no namespace",
            )
        )
    return out


def _selector_terms(terms: Any, path: list[Any], allowed: tuple[str, ...]) -> list[str]:
    out: list[str] = []
    for t, term in enumerate(terms or ()):
        if not isinstance(term, Mapping):
            continue
        for key in ("matchExpressions", "matchFields"):
            for e, expr in enumerate(term.get(key) or ()):
                if isinstance(expr, Mapping):
                    out += _enum(
                        expr.get("operator"),
                        allowed,
                        [*path, t, key, e, "operator"],
                        "selector operator",
                    )
    return out


def _affinity_problems(affinity: Any, path: list[Any]) -> list[str]:
    if not isinstance(affinity, Mapping):
        return []
    out: list[str] = []
    node = affinity.get("nodeAffinity") or {}
    required = (node.get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get(
        "nodeSelectorTerms"
    )
    out += _selector_terms(
        required,
        [
            *path,
            "nodeAffinity",
            "requiredDuringSchedulingIgnoredDuringExecution",
            "nodeSelectorTerms",
        ],
        NODE_SELECTOR_OPERATORS,
    )
    for p, pref in enumerate(node.get("preferredDuringSchedulingIgnoredDuringExecution") or ()):
        if isinstance(pref, Mapping):
            out += _selector_terms(
                [pref.get("preference")],
                [*path, "nodeAffinity", "preferredDuringSchedulingIgnoredDuringExecution", p],
                NODE_SELECTOR_OPERATORS,
            )
    for kind in ("podAffinity", "podAntiAffinity"):
        terms = (affinity.get(kind) or {}).get("requiredDuringSchedulingIgnoredDuringExecution")
        for t, term in enumerate(terms or ()):
            if isinstance(term, Mapping):
                out += _selector_terms(
                    [term.get("labelSelector")],
                    [*path, kind, "requiredDuringSchedulingIgnoredDuringExecution", t],
                    LABEL_SELECTOR_OPERATORS,
                )
    return out


def _pod_spec_problems(spec: Any, path: list[Any], *, in_job: bool) -> list[str]:
    if not isinstance(spec, Mapping):
        return []
    allowed = JOB_RESTART_POLICIES if in_job else RESTART_POLICIES
    what = "a Job's pods" if in_job else "pod restartPolicy"
    out = _enum(spec.get("restartPolicy"), allowed, [*path, "restartPolicy"], what)
    for c, container in enumerate(spec.get("containers") or ()):
        if not isinstance(container, Mapping):
            continue
        if container.get("restartPolicy") is not None:
            out.append(
                problem(
                    [*path, "containers", c, "restartPolicy"],
                    "only init containers take a restartPolicy (Always, for a native sidecar)",
                )
            )
        out += _enum(
            container.get("imagePullPolicy"),
            PULL_POLICIES,
            [*path, "containers", c, "imagePullPolicy"],
            "imagePullPolicy",
        )
    for c, container in enumerate(spec.get("initContainers") or ()):
        if isinstance(container, Mapping):
            out += _enum(
                container.get("restartPolicy"),
                ("Always",),
                [*path, "initContainers", c, "restartPolicy"],
                "an init container's restartPolicy: Always makes it a native sidecar",
            )
            out += _enum(
                container.get("imagePullPolicy"),
                PULL_POLICIES,
                [*path, "initContainers", c, "imagePullPolicy"],
                "imagePullPolicy",
            )
    for t, tol in enumerate(spec.get("tolerations") or ()):
        if isinstance(tol, Mapping):
            out += _enum(
                tol.get("effect") or None,
                TAINT_EFFECTS,
                [*path, "tolerations", t, "effect"],
                "taint effect",
            )
            out += _enum(
                tol.get("operator"),
                TOLERATION_OPERATORS,
                [*path, "tolerations", t, "operator"],
                "toleration operator",
            )
    out += _affinity_problems(spec.get("affinity"), [*path, "affinity"])
    return out


def _job_spec_problems(spec: Any, path: list[Any]) -> list[str]:
    if not isinstance(spec, Mapping):
        return []
    out = _enum(spec.get("completionMode"), COMPLETION_MODES, [*path, "completionMode"], "Job")
    template = spec.get("template")
    if isinstance(template, Mapping):
        out += _meta_problems(template, [*path, "template"])
        out += _pod_spec_problems(template.get("spec"), [*path, "template", "spec"], in_job=True)
    return out


def _jobset_rules(obj: Mapping[str, Any]) -> list[str]:  # noqa: C901  one branch per JobSet field checked
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        return []
    name = (obj.get("metadata") or {}).get("name") or ""
    rjobs = spec.get("replicatedJobs") or []
    out: list[str] = []
    names: list[str] = []
    for r, rjob in enumerate(rjobs):
        if not isinstance(rjob, Mapping):
            continue
        rpath: list[Any] = ["spec", "replicatedJobs", r]
        rname = rjob.get("name")
        if rname in names:
            out.append(problem([*rpath, "name"], f"replicatedJob name {rname!r} is repeated"))
        names.append(rname)
        template = rjob.get("template")
        if not isinstance(template, Mapping):
            continue
        out += _label_problems(
            (template.get("metadata") or {}).get("labels"),
            [*rpath, "template", "metadata", "labels"],
        )
        job_spec = template.get("spec")
        out += _job_spec_problems(job_spec, [*rpath, "template", "spec"])
        # JobSet's admission webhook: generated Job and pod names must be DNS-1035 labels
        if name and isinstance(rname, str) and isinstance(job_spec, Mapping):
            replicas = rjob.get("replicas", 1)
            replicas = replicas if isinstance(replicas, int) and replicas > 0 else 1
            job_name = f"{name}-{rname}-{replicas - 1}"
            if len(job_name) > 63:
                out.append(
                    problem(
                        ["metadata", "name"],
                        f"Job names generated for replicatedJob {rname!r} ({job_name!r}) "
                        "exceed 63 characters: shorten the JobSet name",
                    )
                )
            completions = job_spec.get("completions")
            if job_spec.get("completionMode") == "Indexed" and isinstance(completions, int):
                pod = f"{job_name}-{max(completions - 1, 0)}{_POD_SUFFIX}"
                if len(pod) > 63:
                    out.append(
                        problem(
                            ["metadata", "name"],
                            f"pod names generated for replicatedJob {rname!r} would be "
                            f"{len(pod)} characters ({pod!r}), over 63: shorten the JobSet "
                            "name",
                        )
                    )
    known = set(names)
    for key in ("successPolicy", "failurePolicy"):
        policy = spec.get(key) or {}
        targets = [(["spec", key, "targetReplicatedJobs"], policy.get("targetReplicatedJobs"))]
        for i, rule in enumerate(policy.get("rules") or () if key == "failurePolicy" else ()):
            if isinstance(rule, Mapping):
                targets.append(
                    (
                        ["spec", key, "rules", i, "targetReplicatedJobs"],
                        rule.get("targetReplicatedJobs"),
                    )
                )
        for path, values in targets:
            for v, value in enumerate(values or ()):
                if value not in known:
                    out.append(problem([*path, v], f"no replicatedJob named {value!r}"))
    coordinator = spec.get("coordinator") or {}
    if coordinator.get("replicatedJob") and coordinator["replicatedJob"] not in known:
        out.append(
            problem(
                ["spec", "coordinator", "replicatedJob"],
                f"no replicatedJob named {coordinator['replicatedJob']!r}",
            )
        )
    return out


def _cluster_queue_problems(obj: Mapping[str, Any]) -> list[str]:
    out: list[str] = []
    groups = (obj.get("spec") or {}).get("resourceGroups") or ()
    for g, group in enumerate(groups):
        if not isinstance(group, Mapping):
            continue
        covered = list(group.get("coveredResources") or ())
        for f, flavor in enumerate(group.get("flavors") or ()):
            if not isinstance(flavor, Mapping):
                continue
            names = [r.get("name") for r in flavor.get("resources") or () if isinstance(r, Mapping)]
            if names != covered:
                out.append(
                    problem(
                        ["spec", "resourceGroups", g, "flavors", f, "resources"],
                        f"must list the coveredResources in order ({', '.join(covered)}), "
                        f"got {', '.join(map(str, names))}",
                    )
                )
    return out


def rule_problems(obj: Mapping[str, Any]) -> list[str]:
    """Every problem the rules find in ``obj`` (a manifest with ``kind``), each as
    ``<JSON path>: <message>``."""
    kind = obj.get("kind")
    problems = _meta_problems(obj, [])
    if kind == "JobSet":
        problems += _jobset_rules(obj)
    elif kind == "Job":
        problems += _job_spec_problems(obj.get("spec"), ["spec"])
    elif kind == "Pod":
        problems += _pod_spec_problems(obj.get("spec"), ["spec"], in_job=False)
    elif kind == "ClusterQueue":
        problems += _cluster_queue_problems(obj)
    return problems
