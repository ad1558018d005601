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
    from airflow.configuration import conf

    raw = conf.get("gpufleet", "retry_delay_seconds", fallback=None)
    if raw is None:
        return timedelta(seconds=RETRY_DELAY_S)
    try:
        seconds = float(raw)
    except ValueError:
        seconds = float("nan")
    if not 0 <= seconds <= 600:  # NaN fails too
        raise ValueError(
            f"[gpufleet] retry_delay_seconds must be a number of seconds from 0 to 600, not {raw!r}"
        )
    return timedelta(seconds=seconds)


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
