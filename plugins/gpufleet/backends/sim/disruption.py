"""Evictions in the simulated fleet: PodDisruptionBudgets, and what an eviction does to a Job.

Design: docs/design/simulated-fleet.md.
"""

from __future__ import annotations

import json
import math
import sqlite3
import time
from typing import Any

from gpufleet.backends.sim.placement import pod_phase
from gpufleet.domain.workloads import JOB_NAME_LABEL
from gpufleet.errors import BackendError

PDB_KIND = "PodDisruptionBudget"
# The API server's words, as ``kubectl drain`` shows them.
PDB_REFUSAL = "Cannot evict pod as it would violate the pod's disruption budget."
UNFINISHED = ("Pending", "Running")


def selects(selector: dict[str, Any] | None, labels: dict[str, str]) -> bool:
    """A ``metav1.LabelSelector`` (matchLabels and matchExpressions) against pod labels.

    In policy/v1 an empty selector (``{}``) selects every pod of the namespace; an absent one
    selects none."""
    if selector is None:
        return False
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expr in selector.get("matchExpressions") or ():
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or ()
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def _scaled(value: Any, expected: int, what: str, pdb: str) -> int:
    """An IntOrString: an int, or ``"N%"`` of ``expected`` rounded up."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.endswith("%") and value[:-1].isdigit():
        return math.ceil(int(value[:-1]) * expected / 100)
    raise BackendError(
        f"PodDisruptionBudget {pdb}: {what} {value!r} is neither an integer nor a percentage "
        "such as '50%'; fix the object"
    )


def eviction_refusal(
    conn: sqlite3.Connection, cluster: str, pod: sqlite3.Row, now: float
) -> str | None:
    """Why the Eviction API would refuse to evict ``pod`` now (429), or None if it allows it."""
    if pod_phase(pod, now) != "Running":
        return None  # Pending and finished pods are evicted whatever the budgets say
    namespace, labels = pod["namespace"], json.loads(pod["labels"])
    budgets = [
        json.loads(r["body"])
        for r in conn.execute(
            "SELECT body FROM objects WHERE cluster=? AND kind=? AND namespace=? ORDER BY name",
            (cluster, PDB_KIND, namespace),
        )
    ]
    budgets = [b for b in budgets if selects((b.get("spec") or {}).get("selector"), labels)]
    if not budgets:
        return None
    if len(budgets) > 1:
        names = ", ".join(b["metadata"]["name"] for b in budgets)
        raise BackendError(
            f"evict pod {namespace}/{pod['name']}: this pod has more than one "
            f"PodDisruptionBudget ({names}), which the eviction subresource does not support; "
            "make the budgets' selectors disjoint"
        )
    pdb = budgets[0]
    name, spec = pdb["metadata"]["name"], pdb.get("spec") or {}
    selected = [
        pod_phase(r, now)
        for r in conn.execute(
            "SELECT * FROM pods WHERE cluster=? AND namespace=?", (cluster, namespace)
        )
        if selects(spec.get("selector"), json.loads(r["labels"]))
    ]
    expected = sum(1 for p in selected if p in UNFINISHED)
    healthy = sum(1 for p in selected if p == "Running")
    if spec.get("minAvailable") is not None:
        desired = _scaled(spec["minAvailable"], expected, "minAvailable", name)
    elif spec.get("maxUnavailable") is not None:
        desired = max(
            expected - _scaled(spec["maxUnavailable"], expected, "maxUnavailable", name), 0
        )
    else:  # neither: the API defaults to minAvailable 1
        desired = 1
    if healthy - desired > 0:
        return None
    return (
        f"{PDB_REFUSAL} The disruption budget {name} needs {desired} healthy pods and has "
        f"{healthy} currently"
    )


def fail_workload(conn: sqlite3.Connection, cluster: str, pod: sqlite3.Row, now: float) -> None:
    """The evicted ``pod``'s Job or JobSet fails, as backoffLimit 0 / maxRestarts 0 make it."""
    kind, name, namespace = pod["workload_kind"], pod["workload"], pod["namespace"]
    row = conn.execute(
        "SELECT body FROM objects WHERE cluster=? AND kind=? AND namespace=? AND name=?",
        (cluster, kind, namespace, name),
    ).fetchone()
    if row is None:
        return
    body = json.loads(row["body"])
    spec = body.get("spec") or {}
    if kind == "JobSet":
        restarts = int((spec.get("failurePolicy") or {}).get("maxRestarts") or 0)
        backoff = max(
            (int((rj.get("template") or {}).get("spec", {}).get("backoffLimit") or 0))
            for rj in spec.get("replicatedJobs") or [{}]
        )
        reason = "ReachedMaxRestarts" if "failurePolicy" in spec else "FailedJobs"
        job = json.loads(pod["labels"]).get(JOB_NAME_LABEL) or name
        message = f"pod {pod['name']} was evicted; its Job {job} failed and so did the JobSet"
    else:
        restarts, backoff = 0, int(spec.get("backoffLimit") or 0)
        reason = "BackoffLimitExceeded"
        message = f"pod {pod['name']} was evicted; the Job has reached its backoff limit"
    if restarts or backoff:
        message += " (the sim does not simulate replacement pods or JobSet restarts)"
    _set_condition(conn, cluster, body, kind, "Failed", reason, message, now)
    # The failed Job's controller deletes its other active pods: they end now, their nodes free.
    # Pods never placed go away; pods that ran end Failed and keep their logs.
    conn.execute(
        "DELETE FROM pods WHERE cluster=? AND namespace=? AND workload_kind=? AND workload=? "
        "AND node IS NULL",
        (cluster, namespace, kind, name),
    )
    conn.execute(
        "UPDATE pods SET start_at=MIN(start_at, ?), end_at=?, outcome='Failed', message=? "
        "WHERE cluster=? AND namespace=? AND workload_kind=? AND workload=? "
        "AND (end_at IS NULL OR end_at > ?)",
        (now, now, f"terminated: {message}", cluster, namespace, kind, name, now),
    )


def keep_outcome(conn: sqlite3.Connection, cluster: str, pod: sqlite3.Row, now: float) -> None:
    """Before a finished pod is removed: if its workload has finished, write the terminal
    condition its controller would have set (``Completed``/``Complete`` or ``Failed``), so the
    workload still reads as it ended once its pods are gone, as on a real cluster."""
    kind, name, namespace = pod["workload_kind"], pod["workload"], pod["namespace"]
    row = conn.execute(
        "SELECT body FROM objects WHERE cluster=? AND kind=? AND namespace=? AND name=?",
        (cluster, kind, namespace, name),
    ).fetchone()
    pods = conn.execute(
        "SELECT * FROM pods WHERE cluster=? AND namespace=? AND workload_kind=? AND workload=?",
        (cluster, namespace, kind, name),
    ).fetchall()
    if row is None or any(pod_phase(p, now) in UNFINISHED for p in pods):
        return
    body = json.loads(row["body"])
    if terminal_condition(body) is not None:
        return
    failed = next((p for p in pods if pod_phase(p, now) == "Failed"), None)
    if failed is not None:
        message = f"pod {failed['name']}: {failed['message'] or 'failed'}"
        _set_condition(conn, cluster, body, kind, "Failed", "FailedJobs", message, now)
    else:
        done = "Completed" if kind == "JobSet" else "Complete"
        _set_condition(conn, cluster, body, kind, done, "AllJobsCompleted", None, now)


def _set_condition(
    conn: sqlite3.Connection,
    cluster: str,
    body: dict[str, Any],
    kind: str,
    kind_of_end: str,
    reason: str,
    message: str | None,
    now: float,
) -> None:
    """Store ``body`` with a True ``kind_of_end`` condition (and a JobSet's terminalState)."""
    status = dict(body.get("status") or {})
    condition = {
        "type": kind_of_end,
        "status": "True",
        "reason": reason,
        "lastTransitionTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)),
    }
    if message:
        condition["message"] = message
    status["conditions"] = [
        *(c for c in status.get("conditions") or () if c.get("type") != kind_of_end),
        condition,
    ]
    if kind == "JobSet":
        status["terminalState"] = "Failed" if kind_of_end == "Failed" else "Completed"
    body["status"] = status
    meta = body["metadata"]
    conn.execute(
        "UPDATE objects SET body=? WHERE cluster=? AND kind=? AND namespace=? AND name=?",
        (json.dumps(body), cluster, kind, meta.get("namespace") or "", meta["name"]),
    )


def terminal_condition(body: dict[str, Any]) -> tuple[str, str | None] | None:
    """``("Failed" | "Succeeded", "reason: message")`` from a workload object's True
    ``Failed`` or ``Completed``/``Complete`` condition; None while it has neither."""
    for cond in (body.get("status") or {}).get("conditions") or ():
        if cond.get("status") != "True":
            continue
        phase = {"Failed": "Failed", "Completed": "Succeeded", "Complete": "Succeeded"}.get(
            cond.get("type")
        )
        if phase is not None:
            reason, message = cond.get("reason"), cond.get("message")
            text = f"{reason}: {message}" if reason and message else reason or message
            return phase, text
    return None
