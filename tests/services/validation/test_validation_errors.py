"""A validation that cannot finish records an ``error`` verdict, so the pool stops counting as
validated at once and the gate refuses it saying why (issue 8, item 2).

Through the real operators, triggers and services over the simulated fleet. The failures are
ones gpufleet has no error type for: the simulator's database file corrupted between two
rounds (``sqlite3.DatabaseError``), a pod template that lost its log sidecar on the way in (the
sim answers like the API server: the container does not exist), a node row hand-edited into
invalid JSON, and a workload that never finished in time.
"""

from __future__ import annotations

import asyncio
import shutil
import sqlite3
from contextlib import contextmanager

import pytest
from airflow.sdk.exceptions import AirflowException, TaskDeferred
from airflow.sdk.execution_time.context import OutletEventAccessors

from gpufleet.airflow.operators import FabricValidationOperator, StorageValidationOperator
from gpufleet.backends import cluster_backend
from gpufleet.backends.sim.state import db_path
from gpufleet.config.catalog import load_catalog
from gpufleet.domain.pairing import plan_pass1
from gpufleet.domain.plumbing import NCCL_LOG_CONTAINER
from gpufleet.manifests.nccl_validation import render_nccl_validation
from gpufleet.services.launch.gate import check_gate
from gpufleet.store import Ledger
from tests.support.fleet import validate

CLUSTER, POOL = "a3u-sim", "h200-a"


@pytest.fixture
def fleet(airflow_db, fleet_state):
    return fleet_state


def context(run_id: str) -> dict:
    return {"run_id": run_id, "outlet_events": OutletEventAccessors()}


def first_event(trigger, timeout: float = 60) -> dict:
    """What the triggerer does: run the trigger until it fires; its event's payload."""

    async def first():
        events = trigger.run()
        try:
            return (await anext(events)).payload
        finally:
            await events.aclose()

    return asyncio.run(asyncio.wait_for(first(), timeout))


def deferred(call) -> TaskDeferred:
    with pytest.raises(TaskDeferred) as info:
        call()
    return info.value


@contextmanager
def corrupt_sim_database():
    """The sim's SQLite file replaced by garbage (WAL files set aside), restored afterwards."""
    path = db_path()
    aside = {}
    for suffix in ("", "-wal", "-shm"):
        f = path.with_name(path.name + suffix)
        if f.exists():
            aside[f] = f.with_name(f.name + ".aside")
            shutil.move(f, aside[f])
    path.write_bytes(b"this is not a database\n" * 512)
    try:
        yield
    finally:
        path.unlink()
        for f, moved in aside.items():
            shutil.move(moved, f)


def gate(pool: str = POOL):
    return check_gate(load_catalog(), Ledger, CLUSTER, [pool], 2)


def latest(kind: str, pool: str = POOL) -> dict:
    return Ledger().latest_validation(CLUSTER, pool, kind)


def assert_gate_refuses_because(words: str, pool: str = POOL) -> None:
    decision = gate(pool)
    assert not decision.launch, decision.reasons
    assert any(words in r for r in decision.reasons), decision.reasons


def test_corrupt_sim_database_between_rounds_records_a_fabric_error_and_the_gate_refuses(fleet):
    validate(CLUSTER, POOL)  # yesterday's pass
    assert gate().launch
    op = FabricValidationOperator(task_id="validate_fabric", cluster=CLUSTER, node_pool=POOL)
    ctx = context("manual__corrupt")
    event = first_event(deferred(lambda: op.execute(ctx)).trigger)
    # the task still fails (Airflow's retries apply)
    with corrupt_sim_database(), pytest.raises(sqlite3.DatabaseError):
        op.execute_complete(ctx, event=event)
    row = latest("fabric")
    assert row["verdict"] == "error" and row["passed"] is False
    assert row["run_id"] == "manual__corrupt"
    assert "file is not a database" in row["reasons"][0]
    assert "DatabaseError" in row["reasons"][0]
    assert row["started_at"] < row["finished_at"]  # the attempt's own start, not the error's
    assert_gate_refuses_because("file is not a database")
    # the readiness table says ERROR (not FAIL) and why
    from datetime import UTC, datetime

    from gpufleet.cli.status_cmd import readiness_rows

    (row_h200a,) = [
        r
        for r in readiness_rows(load_catalog(), Ledger(), datetime.now(UTC))
        if r["POOL"] == f"{CLUSTER}/{POOL}"
    ]
    assert row_h200a["FABRIC"].startswith("ERROR"), row_h200a
    assert "could not finish" in row_h200a["WHY"], row_h200a
    # a later success supersedes the error (the ledger orders by insertion)
    assert validate(CLUSTER, POOL, run_id="manual__again", storage=False)["passed"]
    assert latest("fabric")["verdict"] == "pass"
    assert gate().launch


def test_pod_that_lost_its_log_sidecar_records_a_fabric_error(fleet):
    validate(CLUSTER, POOL)
    run_id = "manual__sidecar"
    ref = load_catalog().pool(CLUSTER, POOL)
    backend = cluster_backend(ref.cluster)
    op = FabricValidationOperator(task_id="validate_fabric", cluster=CLUSTER, node_pool=POOL)
    ctx = context(run_id)
    pairs, _ = plan_pass1([n.name for n in backend.list_nodes(POOL) if n.free])
    # what a mutating webhook that drops the sidecar leaves in the cluster under pass 1's
    # name: the service's own (create-if-absent) apply finds it
    manifest = render_nccl_validation(ref, pairs, f"{run_id}-r0")
    for job in manifest["spec"]["replicatedJobs"]:
        pod = job["template"]["spec"]["template"]["spec"]
        pod["initContainers"] = [
            c for c in pod.get("initContainers", []) if c["name"] != NCCL_LOG_CONTAINER
        ]
    backend.apply(manifest)
    # pass 1 (the nodes' GPU health checks in its pods): the webhook's manifest is what runs
    event = first_event(deferred(lambda: op.execute(ctx)).trigger)
    with pytest.raises(Exception, match="is not valid for pod"):
        op.execute_complete(ctx, event=event)
    row = latest("fabric")
    assert row["verdict"] == "error" and row["run_id"] == run_id
    assert f"container '{NCCL_LOG_CONTAINER}' is not valid" in row["reasons"][0]
    assert_gate_refuses_because(f"container '{NCCL_LOG_CONTAINER}' is not valid")


def test_workload_not_done_in_time_records_an_error(fleet):
    validate(CLUSTER, POOL)
    op = FabricValidationOperator(task_id="validate_fabric", cluster=CLUSTER, node_pool=POOL)
    ctx = context("manual__slow")
    trigger = deferred(lambda: op.execute(ctx)).trigger
    _, kwargs = trigger.serialize()
    event = first_event(type(trigger)(**{**kwargs, "timeout": 0.0}))
    assert event["status"] == "timeout"
    with pytest.raises(AirflowException):
        op.execute_complete(ctx, event=event)
    row = latest("fabric")
    assert row["verdict"] == "error" and row["run_id"] == "manual__slow"
    assert event["message"] in row["reasons"][0]
    assert_gate_refuses_because(event["message"])


def test_corrupt_sim_database_during_storage_validation_records_a_storage_error(fleet):
    validate(CLUSTER, POOL)
    op = StorageValidationOperator(task_id="validate_storage", cluster=CLUSTER, node_pool=POOL)
    ctx = context("manual__storage")
    event = first_event(deferred(lambda: op.execute(ctx)).trigger)
    with corrupt_sim_database(), pytest.raises(sqlite3.DatabaseError):
        op.execute_complete(ctx, event=event)
    row = latest("storage")
    assert row["verdict"] == "error" and "file is not a database" in row["reasons"][0]
    assert latest("fabric")["verdict"] == "pass"  # only the kind that could not finish
    assert_gate_refuses_because("file is not a database")


def test_unreadable_node_before_submitting_records_an_error(fleet):
    """A failure while planning (``execute``, before any workload) is recorded too."""
    validate(CLUSTER, POOL)
    node = f"{CLUSTER}-{POOL}-0"
    with sqlite3.connect(db_path()) as conn:
        (labels,) = conn.execute("SELECT labels FROM nodes WHERE name=?", (node,)).fetchone()
        conn.execute("UPDATE nodes SET labels='{broken' WHERE name=?", (node,))
    op = FabricValidationOperator(task_id="validate_fabric", cluster=CLUSTER, node_pool=POOL)
    with pytest.raises(ValueError):
        op.execute(context("manual__planning"))
    with sqlite3.connect(db_path()) as conn:
        conn.execute("UPDATE nodes SET labels=? WHERE name=?", (labels, node))
    row = latest("fabric")
    assert row["verdict"] == "error" and row["run_id"] == "manual__planning"
    assert "JSONDecodeError" in row["reasons"][0]
    assert_gate_refuses_because("JSONDecodeError")
