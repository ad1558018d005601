"""Whether a DAG run is still alive: the one liveness check of every ledger lock (a cluster's
transition, a region's onboarding) and of run-scoped faults.

The Task SDK's ``get_dagrun_state`` returns a ``DagRunState`` enum whose ``str()`` is
``'DagRunState.RUNNING'``, not ``'running'``: the state is compared by its value.

``run_liveness`` is what the ledger locks ask: True (queued or running), False (ended), or
None when this Airflow does not know the run (404: a run of another deployment sharing the
ledger, a ``dags test``, a renamed DAG, a deleted run): the lock's lease then decides
(``domain.leases``), never the 404 alone. ``run_alive`` (run-scoped faults) counts an unknown
run as not alive.
"""

from __future__ import annotations

from typing import Any

ALIVE = frozenset({"queued", "running"})


def run_state(state: Any) -> str:
    """The lower-case value of a run state, whether an enum (SDK or core) or a string."""
    return str(getattr(state, "value", state)).lower()


def _not_found(exc: BaseException) -> bool:
    """The API server answered 404 (the supervisor's ``ErrorResponse`` detail)."""
    detail = getattr(getattr(exc, "error", None), "detail", None)
    return isinstance(detail, dict) and detail.get("status_code") == 404


def dag_run_state(context: Any, dag_id: str, run_id: str) -> str | None:
    """The lower-case state of the run ``dag_id``/``run_id``, or None when this Airflow does
    not know it (404). Any other error raises."""
    from airflow.sdk.api.client import ServerResponseError
    from airflow.sdk.exceptions import AirflowRuntimeError

    try:
        state = context["ti"].get_dagrun_state(dag_id=dag_id, run_id=run_id)
    except AirflowRuntimeError as exc:
        if _not_found(exc):
            return None
        raise
    except ServerResponseError as exc:  # in-process supervisor (dag.test): the API's own error
        if exc.response.status_code == 404:
            return None
        raise
    return run_state(state)


def run_liveness(context: Any, dag_id: str, run_id: str) -> bool | None:
    """True while the run ``dag_id``/``run_id`` is queued or running, False once it ended,
    None when this Airflow does not know it (404). Any other error raises: never "dead" on a
    doubt."""
    if run_id == context["run_id"] and dag_id == context["dag"].dag_id:
        return True
    state = dag_run_state(context, dag_id, run_id)
    return None if state is None else state in ALIVE


def run_alive(context: Any, dag_id: str, run_id: str) -> bool:
    """True while the run ``dag_id``/``run_id`` is queued or running (unknown: False)."""
    return run_liveness(context, dag_id, run_id) is True
