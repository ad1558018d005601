"""A training launch request: its fields, the one check of them, and the parsed request.

One definition serves every reader. ``REQUEST_FIELDS`` holds each field's JSON schema
(draft-07); the DAG's Params are built from it (``field_schema`` adds the catalog's names and
bounds for the form), and ``request_problems`` checks a request against the same schemas, then
against the catalog for what a form cannot express (which pools that cluster has, how many
nodes and GPUs they hold). ``LaunchRequest.from_params`` parses through that check, so the
form, the gate and the submit step refuse the same requests with the same words.

DAG files import this module at parse time: it imports nothing heavy at module level.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import TYPE_CHECKING, Any

from gpufleet.domain.gate import DEFAULT_MAX_AGE
from gpufleet.domain.inputs import InvalidValue, clipped, finite, shown
from gpufleet.domain.launch_inputs import (
    MAX_COMMAND_ARG,
    MAX_COMMAND_ARGS,
    MAX_ENV_VALUE,
    MAX_ENV_VARS,
    MAX_PRIORITY_CLASS,
    PRIORITY_CLASS,
    command_problems,
    env_problems,
    image_problem,
    platform_env_problems,
    priority_class_problem,
)
from gpufleet.domain.names import (
    DNS1035_LABEL,
    DNS1123_LABEL,
    ENV_NAME,
    IMAGE_REF,
    MAX_IMAGE_REF,
    MAX_JOBSET_NAME,
)
from gpufleet.errors import CatalogError, GpufleetError

if TYPE_CHECKING:
    from gpufleet.domain.fleet import Catalog

POLICIES = ("fail", "warn")
DEFAULT_MAX_AGE_HOURS = DEFAULT_MAX_AGE.total_seconds() / 3600

# Every ``pattern`` here is whole-string (``names.whole``): the form (ECMA-262) and jsonschema
# (Python's ``re.search``) mean the same by it, and "NCCL_NET\n" is not a name.
REQUEST_FIELDS: dict[str, dict[str, Any]] = {
    "cluster": {"type": "string", "minLength": 1},
    "pools": {"type": "array", "minItems": 1, "uniqueItems": True, "items": {"type": "string"}},
    "nodes": {"type": "integer", "minimum": 1},
    "gpus_per_node": {"type": "integer", "minimum": 1},
    "job_name": {"type": "string", "pattern": DNS1035_LABEL.pattern, "maxLength": MAX_JOBSET_NAME},
    "namespace": {"type": "string", "pattern": DNS1123_LABEL.pattern, "maxLength": 63},
    "image": {
        "type": "string",
        "minLength": 1,
        "maxLength": MAX_IMAGE_REF,
        "pattern": IMAGE_REF.pattern,
    },
    "command": {
        "type": "array",
        "minItems": 1,
        "maxItems": MAX_COMMAND_ARGS,
        "items": {"type": "string", "maxLength": MAX_COMMAND_ARG},
    },
    "env": {
        "type": "object",
        "maxProperties": MAX_ENV_VARS,
        "propertyNames": {"pattern": ENV_NAME.pattern},
        "additionalProperties": {"type": "string", "maxLength": MAX_ENV_VALUE},
    },
    "priority_class": {
        "type": ["null", "string"],
        "maxLength": MAX_PRIORITY_CLASS,
        "pattern": PRIORITY_CLASS.pattern,
    },
    "transport_policy": {"type": "string", "enum": list(POLICIES)},
    "max_validation_age_hours": {"type": "number", "exclusiveMinimum": 0, "maximum": 168},
}
# the patterns again, for ``fullmatch`` where the value is used (not only the schema's search)
_WHOLE = {"job_name": DNS1035_LABEL, "namespace": DNS1123_LABEL, "image": IMAGE_REF}
# the fields whose problems the domain says in its own words (``domain.launch_inputs``), over
# the schema's (a regex, a bare "is too long"): the values the form and the renderer refuse
_SAID = {
    "image": lambda v: [p] if (p := image_problem(v)) else [],
    "command": command_problems,
    "env": env_problems,
}
_NUMBERS = ("max_validation_age_hours",)  # NaN passes every bound: checked by ``finite``
REQUIRED = (
    "cluster",
    "pools",
    "nodes",
    "gpus_per_node",
    "job_name",
    "namespace",
    "image",
    "command",
)
DEFAULTS: dict[str, Any] = {
    "env": {},
    "priority_class": None,
    "transport_policy": "fail",
    "max_validation_age_hours": DEFAULT_MAX_AGE_HOURS,
}
# what a value must be, for the fields whose schema failure message would only show a regex
_RULES = {
    "job_name": f"a DNS-1035 label of at most {MAX_JOBSET_NAME} characters (lowercase letters, "
    "digits and '-', starting with a letter)",
    "namespace": "a DNS-1123 label of at most 63 characters (lowercase letters, digits and '-')",
    "image": "an OCI image reference",
    "max_validation_age_hours": "a finite number of hours in (0, 168]",
}


class InvalidLaunchRequest(GpufleetError):
    """The request cannot launch as asked; retrying will not change that. ``problems`` lists
    every problem found, each a sentence."""

    def __init__(self, problems: list[str], job: str | None = None, message: str | None = None):
        self.problems = list(problems)
        what = f"launch request {shown(job)}" if job else "launch request"
        super().__init__(message or f"{what} is not valid: " + "; ".join(self.problems))


def field_schema(name: str, index: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``name``'s JSON schema; with the catalog ``index`` (``catalog_index()``), also the fleet's
    clusters and pool names as enums and its largest pool and node as maxima (for the form)."""
    schema = dict(REQUEST_FIELDS[name])
    if index is not None:
        if name == "cluster":
            schema["enum"] = index["clusters"]
        elif name == "pools":
            schema["items"] = {**schema["items"], "enum": index["pool_names"]}
        elif name == "nodes":
            schema["maximum"] = index["max_nodes"]
        elif name == "gpus_per_node":
            schema["maximum"] = index["max_gpus"]
    return schema


@cache
def _validator():
    from jsonschema import Draft7Validator

    return Draft7Validator(
        {"type": "object", "properties": REQUEST_FIELDS, "required": list(REQUIRED)}
    )


def _schema_problems(params: Mapping[str, Any]) -> dict[str, str]:
    """Field -> its first problem against REQUEST_FIELDS."""
    found: dict[str, str] = {}
    for err in sorted(_validator().iter_errors(dict(params)), key=lambda e: e.json_path):
        if err.validator == "required":
            name = next((f for f in REQUIRED if f not in params), "?")
            found.setdefault(name, f"{name} is missing")
            continue
        name = str(err.path[0]) if err.path else "?"
        if name in _RULES:
            message = f"{name} {shown(params[name])} is not {_RULES[name]}"
        else:
            message = f"{name}: {clipped(err.message, 200)}"
        found.setdefault(name, message)
    for name, pattern in _WHOLE.items():  # what the schema's re.search might let through
        value = params.get(name)
        if name not in found and isinstance(value, str) and not pattern.fullmatch(value):
            found[name] = f"{name} {shown(value)} is not {_RULES[name]}"
    for name, said in _SAID.items():
        if name in params and (words := said(params[name])):
            found[name] = "; ".join(words)
    value = params.get("priority_class")
    if isinstance(value, str):  # its name; ``request_problems`` adds what its namespace allows
        if problem := priority_class_problem(value, None, "", ""):
            found["priority_class"] = problem
        else:
            found.pop("priority_class", None)
    for name in _NUMBERS:
        if name not in found and name in params:
            try:
                finite(params[name], name)
            except InvalidValue:
                found[name] = f"{name} {shown(params[name])} is not {_RULES[name]}"
    return found


def request_problems(params: Any, catalog: Catalog) -> list[str]:
    """Every problem with a launch request, each a sentence; empty when it may go to the gate.

    The field schemas first, then the catalog: the cluster exists, the namespace is one of its
    training namespaces (``namespaces``, where onboarding put the Lustre volume and the Kueue
    queues), each target pool is in it and holds ``nodes`` nodes of ``gpus_per_node`` GPUs (a
    job runs within one pool); ``env`` sets none of the names the platform sets on those pools'
    pods (their RDMA/NCCL plumbing, ``domain.plumbing``), and ``priority_class`` is one the
    catalog allows in that namespace (``Cluster.priority_classes``; none listed: none may be
    set; never ``system-*``). All of it before the gate decides: a request refused here is
    recorded nowhere and submits nothing."""
    from gpufleet.domain.plumbing import is_platform_env, pod_plumbing  # the catalog's types

    if not isinstance(params, Mapping):
        return [f"a launch request is a mapping of fields, not {type(params).__name__}"]
    bad = _schema_problems(params)
    problems = list(bad.values())
    if "cluster" in bad:
        return problems
    try:
        cluster = catalog.cluster(params["cluster"])
    except CatalogError as exc:
        return [*problems, str(exc)]
    if "namespace" not in bad and params["namespace"] not in cluster.namespaces:
        listed = ", ".join(cluster.namespaces)
        problems.append(
            f"namespace {params['namespace']!r} is not a training namespace of cluster "
            f"{cluster.name!r} ("
            + (f"its namespaces: {listed}" if listed else "it lists none")
            + "): add it to the cluster's `namespaces` in the catalog and onboard again"
        )
    if "namespace" not in bad and params["namespace"] in cluster.namespaces:
        value = params.get("priority_class")
        if "priority_class" not in bad or isinstance(value, str):
            # said again, naming the classes the catalog allows in that namespace
            problems = [p for p in problems if p != bad.get("priority_class")]
            allowed = cluster.priority_classes.get(params["namespace"], ())
            if problem := priority_class_problem(value, allowed, cluster.name, params["namespace"]):
                problems.append(problem)
    owned: set[str] = set()  # what the platform sets on the target pools' pods
    for name in [] if "pools" in bad else params["pools"]:
        try:
            pool = cluster.pool(name)
        except CatalogError as exc:
            problems.append(str(exc))
            continue
        owned |= set(pod_plumbing(cluster, pool, pin_network=True).env)
        if "nodes" not in bad and params["nodes"] > pool.nodes:
            problems.append(
                f"{cluster.name}/{name} has {pool.nodes} nodes; the job asks {params['nodes']}"
            )
        if "gpus_per_node" not in bad and params["gpus_per_node"] > pool.gpu.count:
            problems.append(
                f"{cluster.name}/{name} nodes have {pool.gpu.count} GPUs; the job asks "
                f"{params['gpus_per_node']} per node"
            )
    if "env" not in bad and isinstance(params.get("env"), Mapping):
        problems += platform_env_problems(
            params["env"], lambda key: is_platform_env(key) or key in owned
        )
    return problems


@dataclass(frozen=True)
class LaunchRequest:
    """A launch request that passed ``request_problems``: build it with ``from_params``."""

    cluster: str
    pools: list[str]
    nodes: int
    gpus_per_node: int
    image: str
    command: list[str]
    namespace: str
    job_name: str
    priority_class: str | None = None
    transport_policy: str = "fail"
    env: dict[str, str] = field(default_factory=dict)
    max_validation_age_hours: float = DEFAULT_MAX_AGE_HOURS

    @classmethod
    def from_params(cls, params: Any, catalog: Catalog) -> LaunchRequest:
        """The request, or InvalidLaunchRequest listing every problem (``request_problems``)."""
        problems = request_problems(params, catalog)
        if problems:
            job = params.get("job_name") if isinstance(params, Mapping) else None
            raise InvalidLaunchRequest(problems, job if isinstance(job, str) else None)
        values = {**DEFAULTS, **{k: params[k] for k in REQUEST_FIELDS if k in params}}
        return cls(
            **{
                **values,
                "pools": list(values["pools"]),
                "command": list(values["command"]),
                "env": dict(values["env"]),
                "max_validation_age_hours": float(values["max_validation_age_hours"]),
            }
        )
