"""Schema validation of the Kubernetes objects gpufleet renders. Pure domain code.

``validate_manifest(obj)`` raises ``ValueError`` listing every problem with its JSON path, e.g.::

    JobSet gpufleet-validation/nccl-h200-a-1a2b3c4d is not valid (2 problems):
      - spec.failurePolicy: Additional properties are not allowed ('maxRestart' was unexpected)
      - spec.replicatedJobs[0].template.spec.template.spec.restartPolicy: 'Sometimes' is not
        one of Never, OnFailure (a Job's pods)

How each kind is checked
- Core kinds (Pod, Job, Namespace, ConfigMap, Secret, PersistentVolume(Claim), ...) with
  ``kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)`` (missing required and,
  strict, unknown fields); on failure every error is collected, not just the first.
- CRD kinds with the JSON schemas in ``include/schemas/`` written from the published API types
  (JobSet v1alpha2; Kueue v1beta1 ResourceFlavor, ClusterQueue, LocalQueue; GKE
  networking.gke.io/v1 Network, GKENetworkParamSet), closed (``additionalProperties: false``)
  where the real CRD is structural, so a misspelt field is caught. Each JobSet replicatedJob's
  template is also validated as a batch/v1 Job with kubernetes-validate.
- Checks neither does: the enums kubernetes-validate leaves open that we rely on
  (``restartPolicy``, ``completionMode``, toleration/taint effects and operators, node
  selector operators, ``imagePullPolicy``), object names and label syntax, cluster-scoped
  kinds without a namespace, and JobSet's admission rules (unique replicatedJob names,
  generated Job and pod names within 63 characters, policy targets that exist).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import referencing
import referencing.jsonschema
from kubernetes_validate import utils as _kv

from gpufleet.config.paths import include_dir
from gpufleet.domain.names import DNS1035_LABEL, DNS1123_SUBDOMAIN, LABEL_NAME, LABEL_VALUE

KUBERNETES_VERSION = "1.33"

# (apiVersion, kind) -> schema file under include/schemas/
CRD_SCHEMAS = {
    ("jobset.x-k8s.io/v1alpha2", "JobSet"): "jobset.x-k8s.io_v1alpha2_jobset.json",
    ("kueue.x-k8s.io/v1beta1", "ResourceFlavor"): "kueue.x-k8s.io_v1beta1_resourceflavor.json",
    ("kueue.x-k8s.io/v1beta1", "ClusterQueue"): "kueue.x-k8s.io_v1beta1_clusterqueue.json",
    ("kueue.x-k8s.io/v1beta1", "LocalQueue"): "kueue.x-k8s.io_v1beta1_localqueue.json",
    ("networking.gke.io/v1", "Network"): "networking.gke.io_v1_network.json",
    ("networking.gke.io/v1", "GKENetworkParamSet"): "networking.gke.io_v1_gkenetworkparamset.json",
}
CLUSTER_SCOPED = frozenset(
    {
        "Namespace",
        "Node",
        "PersistentVolume",
        "PriorityClass",
        "StorageClass",
        "ResourceFlavor",
        "ClusterQueue",
        "Network",
        "GKENetworkParamSet",
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


# --- paths and formatting ---------------------------------------------------------------------


def _fmt(path: Iterable[Any]) -> str:
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "(root)"


def _problem(path: Iterable[Any], message: str) -> str:
    return f"{_fmt(path)}: {message}"


def _schema_message(error: jsonschema.ValidationError) -> str:
    message = error.message
    if error.validator == "additionalProperties":
        message += " (unknown field: check the spelling)"
    elif error.validator == "enum":
        allowed = ", ".join(map(str, error.validator_value))
        message = f"{error.instance!r} is not one of {allowed}"
    return message


# --- core kinds: kubernetes-validate ----------------------------------------------------------


@lru_cache(maxsize=32)
def _k8s_validator(api_version: str, kind: str) -> jsonschema.Draft202012Validator:
    """The validator kubernetes_validate.validate builds, kept to list every error."""
    wanted = _kv.major_minor(KUBERNETES_VERSION)
    version = [v for v in _kv.all_versions() if _kv.major_minor(v) <= wanted][-1]
    group_version = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    folder = f"kubernetes-json-schema/v{version}-local-strict"
    schema = _kv.schema_contents(f"{folder}/{kind.lower()}-{group_version}.json", wanted)
    definitions = _kv.schema_contents(f"{folder}/_definitions.json", wanted)
    registry = referencing.Resource.from_contents(schema) @ referencing.Registry()
    registry = referencing.Resource.from_contents(definitions) @ registry
    return jsonschema.Draft202012Validator(schema, registry=registry)


def _core_problems(obj: Mapping[str, Any], where: list[Any]) -> list[str]:
    try:
        kubernetes_validate.validate(dict(obj), KUBERNETES_VERSION, strict=True)
        return []
    except kubernetes_validate.SchemaNotFoundError:
        known = ", ".join(sorted(f"{k} ({a})" for a, k in CRD_SCHEMAS))
        return [
            _problem(
                [*where, "kind"],
                f"no schema for {obj.get('kind')} ({obj.get('apiVersion')}) in Kubernetes "
                f"{KUBERNETES_VERSION} or gpufleet's CRD schemas ({known})",
            )
        ]
    except kubernetes_validate.ValidationError:
        pass  # list every error below, not only the first
    validator = _k8s_validator(obj["apiVersion"], obj["kind"])
    errors = sorted(validator.iter_errors(dict(obj)), key=lambda e: list(map(str, e.absolute_path)))
    return [_problem([*where, *e.absolute_path], _schema_message(e)) for e in errors]


# --- CRD kinds: our JSON schemas --------------------------------------------------------------


def schema_dir() -> Path:
    """``include/schemas``: JSON schemas of the CRD kinds we render."""
    return include_dir() / "schemas"


@lru_cache(maxsize=4)
def _crd_registry(directory: str) -> referencing.Registry:
    resources = []
    for path in sorted(Path(directory).glob("*.json")):
        contents = json.loads(path.read_text())
        resources.append(
            (contents["$id"], referencing.jsonschema.DRAFT202012.create_resource(contents))
        )
    return referencing.Registry().with_resources(resources)


@lru_cache(maxsize=32)
def _crd_validator(directory: str, filename: str) -> jsonschema.Draft202012Validator:
    schema = json.loads((Path(directory) / filename).read_text())
    return jsonschema.Draft202012Validator(schema, registry=_crd_registry(directory))


def _crd_problems(obj: Mapping[str, Any], filename: str) -> list[str]:
    validator = _crd_validator(str(schema_dir()), filename)
    errors = sorted(validator.iter_errors(obj), key=lambda e: list(map(str, e.absolute_path)))
    out = []
    for error in errors:
        if error.validator in ("oneOf", "anyOf"):
            described = error.schema.get("description") if isinstance(error.schema, dict) else None
            if described:  # e.g. a quantity: say what was expected
                out.append(
                    _problem(error.absolute_path, f"{error.instance!r}: expected {described}")
                )
                continue
            if error.context:  # name the closest concrete cause
                error = jsonschema.exceptions.best_match(error.context)
        out.append(_problem(error.absolute_path, _schema_message(error)))
    return out


# --- checks the schemas do not make -----------------------------------------------------------


def _enum(value: Any, allowed: tuple[str, ...], path: list[Any], what: str) -> list[str]:
    if value is None or value in allowed:
        return []
    return [_problem(path, f"{value!r} is not one of {', '.join(allowed)} ({what})")]


def _label_problems(labels: Any, path: list[Any]) -> list[str]:
    if not isinstance(labels, Mapping):
        return []
    out = []
    for key, value in labels.items():
        prefix, _, name = str(key).rpartition("/")
        if (prefix and (len(prefix) > 253 or not DNS1123_SUBDOMAIN.match(prefix))) or (
            len(name) > 63 or not LABEL_NAME.match(name)
        ):
            out.append(_problem([*path, key], "is not a valid label key"))
        if isinstance(value, str) and (len(value) > 63 or not LABEL_VALUE.match(value)):
            out.append(
                _problem(
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
            out.append(_problem(["metadata", "name"], f"{name!r} is not a {kind}"))
    if path == [] and obj.get("kind") in CLUSTER_SCOPED and meta.get("namespace"):
        out.append(
            _problem(
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
                _problem(
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


def _jobset_problems(obj: Mapping[str, Any]) -> list[str]:
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
            out.append(_problem([*rpath, "name"], f"replicatedJob name {rname!r} is repeated"))
        names.append(rname)
        template = rjob.get("template")
        if not isinstance(template, Mapping):
            continue
        # the Job template as the batch/v1 Job JobSet will create from it
        job = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": template.get("metadata") or {},
            "spec": template.get("spec") or {},
        }
        out += _core_problems(job, [*rpath, "template"])
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
                    _problem(
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
                        _problem(
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
                    out.append(_problem([*path, v], f"no replicatedJob named {value!r}"))
    coordinator = spec.get("coordinator") or {}
    if coordinator.get("replicatedJob") and coordinator["replicatedJob"] not in known:
        out.append(
            _problem(
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
                    _problem(
                        ["spec", "resourceGroups", g, "flavors", f, "resources"],
                        f"must list the coveredResources in order ({', '.join(covered)}), "
                        f"got {', '.join(map(str, names))}",
                    )
                )
    return out


# --- entry points -----------------------------------------------------------------------------


def manifest_problems(obj: Any) -> list[str]:
    """Every problem with ``obj``, each as ``<JSON path>: <message>``; empty when valid."""
    if not isinstance(obj, Mapping):
        return [_problem([], f"a manifest is a mapping, not {type(obj).__name__}")]
    api_version, kind = obj.get("apiVersion"), obj.get("kind")
    if not isinstance(api_version, str) or not isinstance(kind, str):
        return [_problem([], "apiVersion and kind are required strings")]
    problems: list[str] = []
    schema = CRD_SCHEMAS.get((api_version, kind))
    if schema is not None:
        problems += _crd_problems(obj, schema)
    else:
        problems += _core_problems(obj, [])
    problems += _meta_problems(obj, [])
    if kind == "JobSet":
        problems += _jobset_problems(obj)
    elif kind == "Job":
        problems += _job_spec_problems(obj.get("spec"), ["spec"])
    elif kind == "Pod":
        problems += _pod_spec_problems(obj.get("spec"), ["spec"], in_job=False)
    elif kind == "ClusterQueue":
        problems += _cluster_queue_problems(obj)
    return list(dict.fromkeys(problems))  # ordered, without repeats


def validate_manifest(obj: Any) -> None:
    """Raise ``ValueError`` listing every problem (with its JSON path) if ``obj`` is invalid."""
    problems = manifest_problems(obj)
    if not problems:
        return
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    meta = meta if isinstance(meta, Mapping) else {}
    name = meta.get("name") or meta.get("generateName") or "?"
    where = f"{meta['namespace']}/{name}" if meta.get("namespace") else name
    kind = obj.get("kind", "object") if isinstance(obj, Mapping) else "object"
    count = f"{len(problems)} problem{'s' if len(problems) > 1 else ''}"
    raise ValueError(f"{kind} {where} is not valid ({count}):\n  - " + "\n  - ".join(problems))


def validate_manifests(objs: Iterable[Any]) -> None:
    """``validate_manifest`` for each object; one ValueError naming every invalid object."""
    failures = []
    for obj in objs:
        try:
            validate_manifest(obj)
        except ValueError as exc:
            failures.append(str(exc))
    if failures:
        raise ValueError("\n".join(failures))
