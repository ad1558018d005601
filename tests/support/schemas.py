"""Schema validation of the Kubernetes objects gpufleet renders: the tests' oracle.

Reads schemas from files: kubernetes-validate's bundled Kubernetes JSON schemas and the CRD
schemas in ``include/schemas/``.

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
  (JobSet v1alpha2; Kueue v1beta1 ResourceFlavor, ClusterQueue, LocalQueue, Topology; GKE
  networking.gke.io/v1 Network, GKENetworkParamSet), closed (``additionalProperties: false``)
  where the real CRD is structural, so a misspelt field is caught. Each JobSet replicatedJob's
  template is also validated as a batch/v1 Job with kubernetes-validate.
- Checks neither does (enums we rely on, names and labels, JobSet's and Kueue's admission
  rules): :mod:`tests.support.schema_rules`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import referencing
import referencing.jsonschema
from kubernetes_validate import utils as _kv

from gpufleet.config.paths import include_dir
from tests.support.schema_rules import problem, rule_problems

KUBERNETES_VERSION = "1.33"
# Kinds newer than KUBERNETES_VERSION, checked against the first release that serves them
# (MutatingAdmissionPolicy: v1beta1 from 1.34, v1 from 1.36).
KIND_VERSIONS = {
    ("admissionregistration.k8s.io/v1beta1", "MutatingAdmissionPolicy"): "1.34",
    ("admissionregistration.k8s.io/v1beta1", "MutatingAdmissionPolicyBinding"): "1.34",
    ("admissionregistration.k8s.io/v1", "MutatingAdmissionPolicy"): "1.36",
    ("admissionregistration.k8s.io/v1", "MutatingAdmissionPolicyBinding"): "1.36",
}

# (apiVersion, kind) -> schema file under include/schemas/
CRD_SCHEMAS = {
    ("jobset.x-k8s.io/v1alpha2", "JobSet"): "jobset.x-k8s.io_v1alpha2_jobset.json",
    ("kueue.x-k8s.io/v1beta1", "ResourceFlavor"): "kueue.x-k8s.io_v1beta1_resourceflavor.json",
    ("kueue.x-k8s.io/v1beta1", "ClusterQueue"): "kueue.x-k8s.io_v1beta1_clusterqueue.json",
    ("kueue.x-k8s.io/v1beta1", "LocalQueue"): "kueue.x-k8s.io_v1beta1_localqueue.json",
    ("kueue.x-k8s.io/v1beta1", "Topology"): "kueue.x-k8s.io_v1beta1_topology.json",
    ("networking.gke.io/v1", "Network"): "networking.gke.io_v1_network.json",
    ("networking.gke.io/v1", "GKENetworkParamSet"): "networking.gke.io_v1_gkenetworkparamset.json",
}


# --- formatting -------------------------------------------------------------------------------


def _schema_message(error: jsonschema.ValidationError) -> str:
    message = error.message
    if error.validator == "additionalProperties":
        message += " (unknown field: check the spelling)"
    elif error.validator == "enum":
        allowed = ", ".join(map(str, error.validator_value))
        message = f"{error.instance!r} is not one of {allowed}"
    return message


# --- core kinds: kubernetes-validate ----------------------------------------------------------


@lru_cache(maxsize=64)
def _k8s_validator(
    api_version: str, kind: str, kubernetes_version: str = KUBERNETES_VERSION
) -> jsonschema.Draft202012Validator:
    """The validator kubernetes_validate.validate builds, kept to list every error."""
    wanted = _kv.major_minor(kubernetes_version)
    version = [v for v in _kv.all_versions() if _kv.major_minor(v) <= wanted][-1]
    group_version = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    folder = f"kubernetes-json-schema/v{version}-local-strict"
    schema = _kv.schema_contents(f"{folder}/{kind.lower()}-{group_version}.json", wanted)
    definitions = _kv.schema_contents(f"{folder}/_definitions.json", wanted)
    registry = referencing.Resource.from_contents(schema) @ referencing.Registry()
    registry = referencing.Resource.from_contents(definitions) @ registry
    return jsonschema.Draft202012Validator(schema, registry=registry)


def _core_problems(obj: Mapping[str, Any], where: list[Any]) -> list[str]:
    version = KIND_VERSIONS.get((obj.get("apiVersion"), obj.get("kind")), KUBERNETES_VERSION)
    try:
        kubernetes_validate.validate(dict(obj), version, strict=True)
        return []
    except kubernetes_validate.SchemaNotFoundError:
        known = ", ".join(sorted(f"{k} ({a})" for a, k in CRD_SCHEMAS))
        return [
            problem(
                [*where, "kind"],
                f"no schema for {obj.get('kind')} ({obj.get('apiVersion')}) in Kubernetes "
                f"{KUBERNETES_VERSION} or gpufleet's CRD schemas ({known})",
            )
        ]
    except kubernetes_validate.ValidationError:
        pass  # list every error below, not only the first
    validator = _k8s_validator(obj["apiVersion"], obj["kind"], version)
    errors = sorted(validator.iter_errors(dict(obj)), key=lambda e: list(map(str, e.absolute_path)))
    return [problem([*where, *e.absolute_path], _schema_message(e)) for e in errors]


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
                    problem(error.absolute_path, f"{error.instance!r}: expected {described}")
                )
                continue
            if error.context:  # name the closest concrete cause
                error = jsonschema.exceptions.best_match(error.context)
        out.append(problem(error.absolute_path, _schema_message(error)))
    return out


def _jobset_template_problems(obj: Mapping[str, Any]) -> list[str]:
    """Each replicatedJob's template, as the batch/v1 Job JobSet will create from it."""
    out: list[str] = []
    for r, rjob in enumerate((obj.get("spec") or {}).get("replicatedJobs") or ()):
        template = rjob.get("template") if isinstance(rjob, Mapping) else None
        if isinstance(template, Mapping):
            job = {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": template.get("metadata") or {},
                "spec": template.get("spec") or {},
            }
            out += _core_problems(job, ["spec", "replicatedJobs", r, "template"])
    return out


# --- entry points -----------------------------------------------------------------------------


def manifest_problems(obj: Any) -> list[str]:
    """Every problem with ``obj``, each as ``<JSON path>: <message>``; empty when valid."""
    if not isinstance(obj, Mapping):
        return [problem([], f"a manifest is a mapping, not {type(obj).__name__}")]
    api_version, kind = obj.get("apiVersion"), obj.get("kind")
    if not isinstance(api_version, str) or not isinstance(kind, str):
        return [problem([], "apiVersion and kind are required strings")]
    schema = CRD_SCHEMAS.get((api_version, kind))
    problems = _crd_problems(obj, schema) if schema is not None else _core_problems(obj, [])
    if kind == "JobSet":
        problems += _jobset_template_problems(obj)
    problems += rule_problems(obj)
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
