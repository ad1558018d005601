"""Rendered objects checked against the pinned release's own CRD: its OpenAPI schema and its CEL
rules (``x-kubernetes-validations``), as the API server would on create and on update.

The CRD is read from the vendored release manifest (``include/addons``, the file
``releases.yaml`` pins), where the kinds whose rules matter (Kueue's ResourceFlavor and
Topology) are kept as released. ``crd_problems(obj)`` checks a create; with ``old`` (the stored
object) it checks an update too: transition rules (those naming ``oldSelf``) run only where the
stored object has a value, as Kubernetes runs them. CEL is evaluated with cel-python.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from typing import Any

import celpy
import jsonschema

from gpufleet.config.addons import addons_dir, controller_releases, load_release
from tests.support.schema_rules import problem

_MISSING = object()


@cache
def _crds(controller: str) -> dict[tuple[str, str], dict[str, Any]]:
    """(apiVersion, kind) -> the openAPIV3Schema of every CRD version the release serves."""
    release = controller_releases()[controller]
    out = {}
    for obj in load_release(release, str(addons_dir() / release.file)):
        if obj.get("kind") != "CustomResourceDefinition":
            continue
        spec = obj["spec"]
        for version in spec["versions"]:
            key = (f"{spec['group']}/{version['name']}", spec["names"]["kind"])
            out[key] = version["schema"]["openAPIV3Schema"]
    return out


def crd_schema(api_version: str, kind: str, controller: str = "kueue") -> dict[str, Any]:
    try:
        return _crds(controller)[(api_version, kind)]
    except KeyError:
        raise AssertionError(f"the pinned {controller} release has no CRD for {kind}") from None


@cache
def _program(rule: str) -> Any:
    env = celpy.Environment()
    return env.program(env.compile(rule))


def _holds(rule: str, value: Any, old: Any) -> bool:
    activation = {"self": celpy.json_to_cel(value)}
    if old is not _MISSING:
        activation["oldSelf"] = celpy.json_to_cel(old)
    result = _program(rule).evaluate(activation)
    return result is True or result == celpy.celtypes.BoolType(True)


def _cel_problems(schema: Mapping[str, Any], value: Any, old: Any, path: list) -> list[str]:
    out: list[str] = []
    for check in schema.get("x-kubernetes-validations") or ():
        rule = check["rule"]
        if "oldSelf" in rule and old is _MISSING:
            continue  # a transition rule: runs on update only, where a stored value exists
        if not _holds(rule, value, old):
            out.append(problem(path, f"{check.get('message') or rule} (rule: {rule})"))
    if isinstance(value, Mapping):
        for key, sub in (schema.get("properties") or {}).items():
            if key in value:
                was = old.get(key, _MISSING) if isinstance(old, Mapping) else _MISSING
                out += _cel_problems(sub, value[key], was, [*path, key])
    elif isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        for i, item in enumerate(value):
            out += _cel_problems(schema["items"], item, _MISSING, [*path, i])
    return out


def crd_problems(
    obj: Mapping[str, Any], old: Mapping[str, Any] | None = None, controller: str = "kueue"
) -> list[str]:
    """Every problem the release's CRD finds with ``obj`` (as ``<JSON path>: <message>``):
    its OpenAPI schema, then its CEL rules; with ``old``, as an update of that object."""
    schema = crd_schema(obj["apiVersion"], obj["kind"], controller)
    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(obj), key=lambda e: list(map(str, e.absolute_path)))
    out = [problem(e.absolute_path, e.message) for e in errors]
    return out + _cel_problems(schema, obj, _MISSING if old is None else old, [])
