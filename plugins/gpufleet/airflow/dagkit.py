"""What every gpufleet DAG file shares: default args, the validation sub-graph (``validation``)
and the run's ``watcher``. Each DAG's form (``<dag>_params``) is ``gpufleet.airflow.params``.

DAG files import this at parse time, so it does no network and no database access: the
catalog names come from ``catalog_index()``, a small cache keyed on the catalog files.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from gpufleet.airflow.notifiers import FleetAlertNotifier

# The forms are ``gpufleet.airflow.params``; re-exported for the files that import them from
# here (dags/reservation_transition.py, dags/node_health_response.py, tests).
from gpufleet.airflow.params import (  # noqa: F401  re-exported
    NOT_NAN,
    SCHEMA_DIALECT,
    SIM_FAULT_PATTERN,
    drill_params,
    launch_param,
    launch_params,
    name_list_param,
    nightly_params,
    onboarding_params,
    param,
    transition_params,
)
from gpufleet.config.catalog_index import catalog_index

OWNER = "gpufleet-platform"

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


POOL_MAP_INDEX = "{{ task.cluster }}/{{ task.node_pool }}"  # a mapped pool task's UI label


def validation(
    targets: type,
    scope: dict[str, Any],
    *,
    retries: int,
    fabric: dict[str, Any] | None = None,
    storage: dict[str, Any] | None = None,
    remediation: dict[str, Any] | None = None,
) -> Any:
    """The validation sub-graph every DAG that validates pools shares, as one TaskGroup
    (``validation``; task ids unprefixed): ``fabric_targets`` and ``storage_targets`` (a
    ``targets`` operator, given ``kind`` and ``scope``) mapped into ``validate_fabric`` (each
    pool's validation emits ``pool-validated``) and ``validate_storage`` (as the targets map it:
    the nightly's once per filesystem, ``scope.plan_scope``), each instance labelled
    ``cluster/pool``. ``fabric``/``storage``: the validations' own arguments;
    ``remediation``: also ``remediation_targets`` after the fabric validations and
    ``remediate_nodes`` mapped over the pools it names (the nightly's: only pools with a node
    to drain, repair or page for). ``group["fabric_targets"]`` and the like reach its tasks."""
    from airflow.sdk import TaskGroup

    from gpufleet.airflow.assets import POOL_VALIDATED
    from gpufleet.airflow.operators import FabricValidationOperator, StorageValidationOperator

    with TaskGroup(
        "validation", prefix_group_id=False, tooltip="each pool: fabric (NCCL) and storage (Lustre)"
    ) as group:
        fabric_targets = targets(task_id="fabric_targets", kind="fabric", **scope)
        storage_targets = targets(task_id="storage_targets", kind="storage", **scope)
        checks = FabricValidationOperator.partial(
            task_id="validate_fabric",
            outlets=[POOL_VALIDATED],
            retries=retries,
            map_index_template=POOL_MAP_INDEX,
            **(fabric or {}),
        ).expand_kwargs(fabric_targets.output)
        StorageValidationOperator.partial(
            task_id="validate_storage",
            retries=retries,
            map_index_template=POOL_MAP_INDEX,
            **(storage or {}),
        ).expand_kwargs(storage_targets.output)
        if remediation is not None:
            from gpufleet.airflow.operators.nightly import RemediationTargetsOperator
            from gpufleet.airflow.operators.remediation import NodeRemediationOperator

            # after the pools' validations (which retested their nodes out of service), only
            # the pools with a node to drain, repair or page for: none on a healthy night
            due = RemediationTargetsOperator(
                task_id="remediation_targets", trigger_rule="all_done", retries=retries
            )
            checks >> due
            NodeRemediationOperator.partial(
                task_id="remediate_nodes",
                retries=retries,
                map_index_template=POOL_MAP_INDEX,
                **remediation,
            ).expand_kwargs(due.output)
    return group


def nightly_validation(scope: dict[str, Any]) -> Any:
    """The nightly's ``validation`` group over ``scope`` (templated regions, clusters, pools,
    mode), with the settings of its form (``nightly_params``): a pool another run validates is
    skipped (its verdict stands), and the nodes a pool's validation retested and failed are
    drained and repaired. ``nightly_fabric_validation`` and ``sim_fault_drill`` run it."""
    from gpufleet.airflow.operators.nightly import ValidationTargetsOperator

    return validation(
        ValidationTargetsOperator,
        scope,
        retries=1,
        fabric={
            "when_busy": "skip",
            "max_quarantine_share": "{{ params.max_quarantine_share }}",
            "tolerance": "{{ params.tolerance }}",
            "max_repairs": "{{ params.max_repairs }}",
        },
        storage={"when_busy": "skip"},
        remediation={
            "max_repairs": "{{ params.max_repairs }}",
            "drain": "{{ params.repair_drain }}",
        },
    )


def watch() -> Any:
    """Airflow's ``watcher()`` idiom, as its system tests write it: a task downstream of every
    task of the DAG being defined, with trigger rule ``one_failed``, so a failed task fails the
    run although a report or teardown after it succeeded. Call it last in the DAG function.
    Setup tasks are the exception Airflow demands (a setup's direct downstream tasks must be
    ``all_success``): a failed setup reaches the watcher as its tasks' ``upstream_failed``."""
    from gpufleet.airflow.operators.common import RunWatcherOperator

    watcher = RunWatcherOperator()
    [task for task in watcher.dag.tasks if task is not watcher and not task.is_setup] >> watcher
    return watcher
