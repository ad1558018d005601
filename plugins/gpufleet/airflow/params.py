"""Every gpufleet DAG's form: its Params (``<dag>_params``, every field a ``param``).

DAG files import this at parse time, so it does no network and no database access: the
catalog names come from ``catalog_index()`` (``gpufleet.airflow.dagkit.index``), a small cache
keyed on the catalog files.

What a Param costs at parse: Airflow deep-copies the DAG's Params into every task and, when it
serializes the DAG, validates each task's copy twice (comparing it with the defaults and
printing it), each validation first checking the schema against its dialect's metaschema
(docs/PERFORMANCE.md, DAG parse time). So a form's cost is its tasks x its Params x their
schemas' size: forms keep few fields, small schemas, and the draft-07 dialect.
"""

from __future__ import annotations

from typing import Any

from airflow.sdk import Param

from gpufleet.config.catalog_index import catalog_index
from gpufleet.domain.faults import PARAM_PATTERN
from gpufleet.domain.names import DNS1123_LABEL, POOL_KEY

# A run-scoped sim fault as a DAG Param writes it: ``<cluster>/<pool>=<fault>[:<argument>]``
# (the argument is checked by ``gpufleet.domain.faults.parse_fault`` when the run starts).
SIM_FAULT_PATTERN = PARAM_PATTERN  # the fault grammar, as a JSON-schema pattern


# The JSON Schema dialect our Param schemas are written in. Airflow validates Params with
# jsonschema, which picks the validator from "$schema" (default: 2020-12) and checks the schema
# against that dialect's metaschema on every validation; a scheduled DAG's Params are validated
# for every task each time the DAG is serialized, and draft-07's metaschema check costs a
# quarter of 2020-12's (bench/parse_time.py). Draft-07 has every keyword the forms use.
SCHEMA_DIALECT = "http://json-schema.org/draft-07/schema#"


# NaN passes ``minimum`` and ``maximum`` (every comparison with it is false) and JSON from
# Python, the CLI or the REST API can carry it. No real number is both >= 0 and < 0; NaN fails
# neither check, so it alone is valid under this schema, and ``not`` refuses it. Infinities are
# refused by the bounds, which every number Param must therefore have.
NOT_NAN = {
    "$comment": "NaN is not a number: give a finite one",
    "type": "number",
    "minimum": 0,
    "exclusiveMaximum": 0,
}


def param(default: Any, **schema: Any) -> Param:
    """A DAG Param whose JSON schema declares its dialect (draft-07). A ``number`` Param must be
    bounded on both sides and refuses NaN (``NOT_NAN``)."""
    types = schema.get("type")
    if "number" in ([types] if isinstance(types, str) else list(types or [])):
        low = "minimum" in schema or "exclusiveMinimum" in schema
        high = "maximum" in schema or "exclusiveMaximum" in schema
        if not (low and high):
            raise ValueError(
                f"a number Param needs a minimum and a maximum (infinities pass without): {schema}"
            )
        schema = {**schema, "not": NOT_NAN}
    dialect: dict[str, Any] = {"$schema": SCHEMA_DIALECT}  # a keyword no identifier can name
    return Param(default, **dialect, **schema)


_REQUEST_DEFAULT = object()


def launch_param(name: str, default: Any = _REQUEST_DEFAULT, **form: Any) -> Param:
    """A launch DAG Param whose schema is the launch request's own for ``name``
    (``gpufleet.services.launch.request``, the one the gate checks), with the fleet's names and
    bounds. ``default``: the request's own default for an optional field, else required here;
    ``form`` adds title, section and description."""
    from copy import deepcopy

    from gpufleet.services.launch.request import DEFAULTS, field_schema

    if default is _REQUEST_DEFAULT:
        default = deepcopy(DEFAULTS[name])
    return param(default, **field_schema(name, catalog_index()), **form)


def name_list_param(
    values: list[str], title: str, description: str, section: str = "Scope"
) -> Param:
    """An optional multi-select over catalog names (empty = all)."""
    return param(
        [],
        type="array",
        items={"type": "string", "enum": values} if values else {"type": "string"},
        uniqueItems=True,
        title=title,
        description=description,
        section=section,
    )


def nightly_params(fleet: dict[str, Any]) -> dict[str, Param]:
    """The nightly's Params (scope, checks, node remediation), shared by the
    ``nightly_fleet_validation`` planner and the ``nightly_fabric_validation`` runs it starts:
    the planner hands each run its settings under the same names. ``fleet``: ``catalog_index()``."""
    return {
        "regions": name_list_param(fleet["regions"], "Regions", "Only these regions (empty: all)"),
        "clusters": name_list_param(
            fleet["clusters"], "Clusters", "Only these clusters (empty: all)"
        ),
        # pools by form, not by enum: a scheduled DAG's Params are validated at every parse,
        # and a fleet's thousands of pools made that the largest cost (docs/PERFORMANCE.md)
        "pools": param(
            [],
            type="array",
            uniqueItems=True,
            title="Node pools",
            section="Scope",
            items={"type": "string", "pattern": POOL_KEY.pattern},
            description="Only these pools, as cluster/pool (empty: all); checked against the "
            "fleet catalog when the run starts",
        ),
        "mode": param(
            "both",
            type="string",
            enum=["both", "fabric", "storage"],
            title="Checks",
            description="Fabric (NCCL), storage (Lustre fio) or both",
            section="Checks",
        ),
        "max_quarantine_share": param(
            0.2,
            type="number",
            minimum=0,
            maximum=1,
            title="Max quarantine share",
            description="Quarantine nothing and page a human if more than this share of a pool "
            "fails (a fabric problem, not a node problem)",
            section="Checks",
        ),
        "tolerance": param(
            None,
            type=["null", "number"],
            exclusiveMinimum=0,
            maximum=1,
            title="Bandwidth tolerance",
            description="Share of the baseline busbw a pair must reach (empty: each pool's "
            "catalog setting, default 0.9)",
            section="Checks",
        ),
        "max_repairs": param(
            2,
            type="integer",
            minimum=0,
            maximum=10,
            title="Repairs before a person",
            description="A node whose retest still fails after this many cloud repairs is "
            "handed to a human (needs-human, paged)",
            section="Node remediation",
        ),
        "repair_drain": param(
            "wait",
            type="string",
            enum=["wait", "evict"],
            title="Training jobs on a node to repair",
            description="wait for them (named in an alert; the next night looks again), or "
            "evict them through the Eviction API",
            section="Node remediation",
        ),
    }


def drill_params(fleet: dict[str, Any]) -> dict[str, Param]:
    """The ``sim_fault_drill`` form: the nightly's (``nightly_params``), its clusters the sim
    ones only, plus ``sim_faults``: faults injected for the drill's run alone. No production
    form has that field. ``fleet``: ``catalog_index()``."""
    params = nightly_params(fleet)
    params["clusters"] = name_list_param(
        fleet["sim_clusters"], "Clusters", "Only these sim clusters (empty: every sim cluster)"
    )
    params["sim_faults"] = param(
        [],
        type="array",
        items={"type": "string", "pattern": SIM_FAULT_PATTERN},
        title="Simulated faults",
        description="cluster/pool=fault for this run only, e.g. a3u-sim/h200-a=fabric-down",
        section="Simulation",
    )
    return params


def launch_params(fleet: dict[str, Any]) -> dict[str, Param]:
    """The ``gated_training_launch`` form: each field's schema is the launch request's own
    (``launch_param``: the one the gate checks), with the fleet's names and bounds.
    ``fleet``: ``catalog_index()``."""
    return {
        "cluster": launch_param(
            "cluster",
            fleet["clusters"][0] if fleet["clusters"] else None,
            title="Cluster",
            section="Placement",
        ),
        "pools": launch_param(
            "pools",
            [],
            title="Node pools",
            section="Placement",
            description="Target pools in that cluster; the job runs on the first "
            "with enough free nodes",
        ),
        "nodes": launch_param("nodes", 2, title="Nodes", section="Placement"),
        "gpus_per_node": launch_param(
            "gpus_per_node", fleet["max_gpus"], title="GPUs per node", section="Placement"
        ),
        "job_name": launch_param(
            "job_name",
            "",
            title="Job name",
            description="JobSet name: lowercase letters, digits, '-'",
            section="Job",
        ),
        "namespace": launch_param("namespace", "default", title="Namespace", section="Job"),
        "image": launch_param(
            "image",
            "",
            title="Image",
            section="Job",
            description="An OCI image reference, e.g. nvcr.io/nvidia/pytorch:24.05-py3",
        ),
        "command": launch_param(
            "command",
            [],
            title="Command",
            section="Job",
            description='The container command, e.g. ["torchrun", "train.py"] (at most 64 '
            "arguments of 4 KiB)",
        ),
        "env": launch_param(
            "env",
            title="Environment",
            section="Job",
            description="Extra variables, each value at most 32 KiB, 256 KiB in all (the "
            "platform's NCCL/EFA/library keys and the rendezvous ones are refused)",
        ),
        "priority_class": launch_param(
            "priority_class",
            title="Priority class",
            section="Job",
            description="Empty, or one the catalog allows in the namespace (never system-*)",
        ),
        "transport_policy": launch_param(
            "transport_policy",
            title="On a transport mismatch",
            section="Policy",
            description="fail: stop the job and flag the pool; warn: alert and let it run",
        ),
        "max_validation_age_hours": launch_param(
            "max_validation_age_hours",
            title="Max validation age (hours)",
            section="Policy",
        ),
    }


def onboarding_params(fleet: dict[str, Any]) -> dict[str, Param]:
    """The ``region_onboarding`` form. ``fleet``: ``catalog_index()``."""
    return {
        "region": param(
            None,
            type="string",
            enum=fleet["regions"],
            title="Region",
            description="The catalog region to onboard",
        ),
        "dry_run": param(
            False,
            type="boolean",
            title="Dry run",
            description="Print the plan (what exists, would be created, differs); create nothing",
        ),
        "validate": param(
            True,
            type="boolean",
            title="Validate",
            description="Validate the new nodes and mark the region ready (false: the nodes "
            "stay tainted unvalidated and the region is not ready)",
        ),
        "nodes_ready_timeout_minutes": param(
            30,
            type="number",
            minimum=0.05,
            maximum=1440,
            title="Nodes Ready timeout (minutes)",
            description="How long to wait for new nodes to become Ready; one that is not by "
            "then stays tainted, is named, and the region is not marked ready",
        ),
    }


def transition_params(fleet: dict[str, Any]) -> dict[str, Param]:
    """The ``reservation_transition`` form. ``fleet``: ``catalog_index()``."""
    return {
        "cluster": param(None, type="string", enum=fleet["clusters"], title="Cluster"),
        "old_pool": param(
            None,
            type="string",
            pattern=DNS1123_LABEL.pattern,
            maxLength=63,
            title="Old pool",
            description="The pool in service to retire (a catalog pool of the cluster)",
        ),
        "new_pool": param(
            None,
            type="string",
            pattern=DNS1123_LABEL.pattern,
            maxLength=63,
            title="New pool",
            description="The catalog pool declared `state: planned` on the new reservation",
        ),
        "action": param(
            "run",
            type="string",
            enum=["run", "rollback", "abandon"],
            title="Action",
            description="run (a rerun resumes), rollback (until the old pool is deleted), "
            "abandon (release the lock, leave everything as it is)",
        ),
        "drain_batch_size": param(
            1,
            type="integer",
            minimum=1,
            maximum=1000,
            title="Nodes per drain batch",
            section="Drain",
        ),
        "soak_minutes": param(
            5.0,
            type="number",
            minimum=0,
            maximum=1440,
            title="Soak between batches (minutes)",
            section="Drain",
        ),
        "drain_timeout_hours": param(
            4.0,
            type="number",
            minimum=0,
            maximum=720,
            title="Drain timeout (hours)",
            section="Drain",
        ),
        "on_timeout": param(
            "wait",
            type="string",
            enum=["wait", "fail", "evict"],
            title="Training jobs still running at the timeout",
            description="wait (keep waiting, alert again every few hours), fail, or evict",
            section="Drain",
        ),
    }
