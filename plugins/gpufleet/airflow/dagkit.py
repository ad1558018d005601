"""What every gpufleet DAG file shares: default args, and Params built from the catalog.

DAG files import this at parse time, so it does no network and no database access: the
catalog names come from ``catalog_index()``, a small cache keyed on the catalog files.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from airflow.sdk import Param

from gpufleet.airflow.notifiers import FleetAlertNotifier
from gpufleet.config.catalog_index import catalog_index
from gpufleet.domain.faults import PARAM_PATTERN
from gpufleet.domain.names import POOL_KEY

OWNER = "gpufleet-platform"

# A run-scoped sim fault as a DAG Param writes it: ``<cluster>/<pool>=<fault>[:<argument>]``
# (the argument is checked by ``gpufleet.domain.faults.parse_fault`` when the run starts).
SIM_FAULT_PATTERN = PARAM_PATTERN  # the fault grammar, as a JSON-schema pattern


RETRY_DELAY_S = 30.0  # a failed task's first retry; doubling up to MAX_RETRY_DELAY


def retry_delay() -> timedelta:
    """The first retry's delay: ``[gpufleet] retry_delay_seconds`` in Airflow's configuration
    (``AIRFLOW__GPUFLEET__RETRY_DELAY_SECONDS``), else 30 s; read when the DAG file is parsed,
    so every component of a deployment must see the same value. A value that is not a finite
    number from 0 to 600 is refused, naming the setting."""
    return timedelta(seconds=_seconds_setting("retry_delay_seconds", RETRY_DELAY_S, 0, 600))


RUN_POLL_S = 60.0  # how often the planner looks at the runs it started
# nightly_fabric_validation runs at once (one per cluster): each runs its own 16 tasks
CLUSTER_RUNS_AT_ONCE = 16


def _seconds_setting(key: str, default: float, low: float, high: float) -> float:
    """``[gpufleet] <key>`` in seconds (default ``default``), refused outside ``low``-``high``."""
    from airflow.configuration import conf

    raw = conf.get("gpufleet", key, fallback=None)
    if raw is None:
        return default
    try:
        seconds = float(raw)
    except ValueError:
        seconds = float("nan")
    if not low <= seconds <= high:  # NaN fails too
        raise ValueError(
            f"[gpufleet] {key} must be a number of seconds from {low:g} to {high:g}, not {raw!r}"
        )
    return seconds


def run_poll_seconds() -> int:
    """How often ``nightly_fleet_validation`` looks whether the cluster runs it started are
    done: ``[gpufleet] run_poll_seconds`` (1-3600, default 60), read when the DAG is parsed."""
    return int(_seconds_setting("run_poll_seconds", RUN_POLL_S, 1, 3600))


def default_args(summary: str, retries: int = 2) -> dict[str, Any]:
    """Owner, retries with exponential backoff (from ``retry_delay()``), and an alert on every
    task failure."""
    return {
        "owner": OWNER,
        "retries": retries,
        "retry_delay": retry_delay(),
        "retry_exponential_backoff": True,
        "max_retry_delay": timedelta(minutes=10),
        "on_failure_callback": [FleetAlertNotifier(summary=summary)],
    }


def index() -> dict[str, Any]:
    return catalog_index()


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
    return Param(default, **{"$schema": SCHEMA_DIALECT}, **schema)


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
    return param(default, **field_schema(name, index()), **form)


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
    """The nightly's Params (scope, checks, node remediation, simulation), shared by the
    ``nightly_fleet_validation`` planner and the ``nightly_fabric_validation`` runs it starts:
    the planner hands each run its settings under the same names. ``fleet``: ``index()``."""
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
        "sim_faults": param(
            [],
            type="array",
            items={"type": "string", "pattern": SIM_FAULT_PATTERN},
            title="Simulated faults (sim clusters only)",
            description="cluster/pool=fault for this run only, e.g. a3u-sim/h200-a=fabric-down",
            section="Simulation",
        ),
    }
