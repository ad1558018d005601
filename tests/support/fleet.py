"""Helpers for end-to-end tests on the simulated fleet."""

from __future__ import annotations

import contextlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def get_dag(dag_id: str):
    """The DAG as the dag-processor loads it, parsed afresh (a run's conf must not leak into
    the next run through a shared DAG object)."""
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(ROOT / "dags" / f"{dag_id}.py"))
    assert not bag.import_errors, bag.import_errors
    return bag.dags[dag_id]


def run_dag(
    dag_id: str,
    conf: dict | None = None,
    mark_success: str | None = None,
    logical_date=None,
    on_idle=None,
):
    """``dag.test()``: every task in this process, triggers inline. Returns the DagRun.
    ``mark_success``: a regex of task ids marked successful instead of run; ``logical_date``:
    the run's (its run id is then ``manual__<logical_date>``), else now. ``on_idle``: called
    whenever ``dag.test()`` waits with nothing to run (a human-in-the-loop task waiting for its
    answer: ``tests.support.hitl`` answers it, or lets its time run out, as the REST API and the
    scheduler would).

    ``dag.test()`` waits for a retry on the wall clock (``retry_delay``, 30 s and growing):
    here a retry is due at once, as if that time had passed. How many tries a task gets and
    what each does is the DAG's own."""
    from datetime import timedelta

    dag = get_dag(dag_id)
    for task in dag.tasks:
        task.retry_delay = timedelta(0)
        task.retry_exponential_backoff = False
    with short_idle_waits(on_idle=on_idle):
        when = (
            {}
            if logical_date is None
            else {"logical_date": logical_date, "run_after": logical_date}
        )
        return dag.test(run_conf=conf or {}, mark_success_pattern=mark_success, **when)


@contextlib.contextmanager
def short_idle_waits(longest: float = 0.01, on_idle=None):
    """``dag.test()`` sleeps a wall-clock second whenever no task is runnable, which happens
    once per layer of tasks a failure marks upstream_failed (a failing onboarding run: five
    seconds doing nothing). Its loop rereads the run's state between sleeps, so here each of
    its own sleeps lasts at most ``longest`` (in process, where triggers run inline and retries
    are due at once, 10 ms); every other caller of ``time.sleep`` sleeps as asked."""
    import sys
    import time

    real = time.sleep

    def sleep(seconds: float) -> None:
        caller = sys._getframe(1).f_code.co_filename
        if caller.endswith(DAG_TEST_FILE) and on_idle is not None:
            on_idle()
        real(min(seconds, longest) if caller.endswith(DAG_TEST_FILE) else seconds)

    time.sleep = sleep
    try:
        yield
    finally:
        time.sleep = real


DAG_TEST_FILE = "/airflow/sdk/definitions/dag.py"  # where dag.test() lives


class SimTriggerClock:
    """``PollingTrigger.clock`` in tests (installed for every test by tests/conftest.py): the
    simulated fleet's clock in this test's state file (looked up at each read: the state file is
    the test's), so a trigger's poll interval, timeout and wait (``WaitTrigger``) pass on the
    time the sim's pods, nodes and drains run on; sleeping advances that clock instead of
    waiting. A ``gpufleet.domain.clock.Clock``."""

    @staticmethod
    def _sim():
        from gpufleet.backends.sim.state import SimState

        return SimState().clock

    def time(self) -> float:
        return self._sim().time()

    def now(self):
        return self._sim().now()

    def monotonic(self) -> float:
        return self._sim().time()

    def sleep(self, seconds: float) -> None:
        self._sim().advance(max(seconds, 0.0))


def task_states(dagrun) -> dict[str, str]:
    """``task_id`` (``task_id[map_index]`` for mapped tasks) -> final state."""
    out = {}
    for ti in dagrun.get_task_instances():
        key = ti.task_id if ti.map_index < 0 else f"{ti.task_id}[{ti.map_index}]"
        out[key] = str(ti.state.value if hasattr(ti.state, "value") else ti.state)
    return out


def frozen_sim_clock():
    """The sim's clock (in this test's state file), frozen: only ``advance`` moves it, so a
    test decides what time it is instead of sleeping (``GPUFLEET_SIM_SPEED`` then scales
    how far it advances, never how long it waits)."""
    from gpufleet.backends.sim.state import SimState

    clock = SimState().clock
    clock.freeze()
    return clock


def validate(cluster: str, pool: str, run_id: str = "seed", storage: bool = True, ref=None) -> dict:
    """Run a real fabric (and storage) validation of one sim pool through the services; the
    summaries as the operators hand them to XCom (``to_dict``). ``ref``: the pool as a test
    changed it (default: the catalog's)."""
    from gpufleet.config.catalog import load_catalog
    from gpufleet.services.validation.fabric import FabricValidation
    from gpufleet.services.validation.storage import StorageValidation
    from gpufleet.store import Ledger

    ref = ref or load_catalog().pool(cluster, pool)
    ledger = Ledger()
    svc = FabricValidation(ref, ledger)
    state = svc.begin(run_id)
    while state.workload or state.health_recheck_at is not None:
        if state.workload is None:  # a GPU health recheck not due yet: the clock passes
            _until(svc.backend, state.health_recheck_at)
            state = svc.recheck(state)
            continue
        _wait(svc.backend, state.workload)
        state = svc.collect(state)
    summary = svc.finish(state).to_dict()
    if storage and ref.filesystem:
        sto = StorageValidation(ref, ledger)
        st = sto.begin(run_id)
        if st.workload:
            _wait(sto.backend, st.workload)
        summary["storage"] = sto.finish(st).to_dict()
    return summary


def lifecycle_night(cluster: str, pool: str, n: int, settings=None) -> dict:
    """One night of the node lifecycle for a sim ``pool``: validate (the GPU health check and
    the retests first), then the remediation pass; the clock then passes a sim repair's time
    (a repair or a reboot requested tonight is over by the next night)."""
    from gpufleet.backends.sim.cloud_table import CREATE_S
    from gpufleet.backends.sim.programs import speed
    from gpufleet.config.catalog import load_catalog
    from gpufleet.services.nodes.remediation import NodeRemediation
    from gpufleet.store import Ledger

    run_id = f"night-{n}"
    clock = frozen_sim_clock()
    summary = validate(cluster, pool, run_id=run_id, storage=False)
    ref = load_catalog().pool(cluster, pool)
    result = NodeRemediation(ref, Ledger(), settings).step(run_id)
    clock.advance(CREATE_S["repair"] * speed())
    return {"summary": summary, "remediation": result}


def _until(backend, at: float) -> None:
    """Advance the sim's clock to ``at`` (a UNIX time), if it is not there yet."""
    from gpufleet.services.nodes.drain import backend_clock

    clock = backend_clock(backend)
    if at > clock.time():
        clock.advance(at - clock.time())


def _wait(backend, wl, timeout: float = 600, step: float = 0.1) -> None:
    """Until the ``Workload`` is done, advancing the sim's clock ``step`` seconds at a time
    (``timeout``: in simulated seconds; no wall-clock wait)."""
    from gpufleet.services.nodes.drain import backend_clock

    clock, waited = backend_clock(backend), 0.0
    while not backend.workload_status(wl.kind, wl.name, wl.namespace).done:
        assert waited < timeout, f"{wl.name} did not finish in {timeout} simulated seconds"
        clock.advance(step)
        waited += step


def asset_events(uri: str, run_id: str | None = None) -> list[dict]:
    """The ``extra`` of every event on an asset (from Airflow's metadata DB), oldest first."""
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        query = (
            select(AssetEvent)
            .join(AssetModel, AssetEvent.asset_id == AssetModel.id)
            .where(AssetModel.uri == uri)
            .order_by(AssetEvent.id)
        )
        events = session.scalars(query).all()
        return [dict(e.extra or {}) for e in events if run_id is None or e.source_run_id == run_id]


def named_ledger_env() -> dict[str, str]:
    """Environment for a ``gpufleet`` CLI subprocess that names this test's ledger directly
    (``GPUFLEET_LEDGER_URL``: the state folder's default file, created here). Without it each
    command asks Airflow for the ``gpufleet_ledger`` connection, about 4 s a command; that
    lookup is proven once, in tests/store/test_ledger_resolution.py. A test about which ledger the
    CLI finds passes ``GPUFLEET_LEDGER_URL=""`` to go through the lookup."""
    from gpufleet.store import Ledger

    return {"GPUFLEET_LEDGER_URL": Ledger().url}


def snapshot(cluster: str, pool: str, run_id: str = "seed") -> None:
    """Record the sim pool's node snapshot as a validation leaves it (for tests that write a
    night's rows by hand: the read paths read nodes from the ledger only)."""
    from gpufleet.backends import cluster_backend
    from gpufleet.config.catalog import load_catalog
    from gpufleet.services.common.snapshots import snapshot_pool
    from gpufleet.store import Ledger

    ref = load_catalog().pool(cluster, pool)
    snapshot_pool(ref, Ledger(), cluster_backend(ref.cluster), source="fabric", run_id=run_id)


def xcom_value(dagrun, task_id: str, key: str = "return_value"):
    """What ``task_id`` (unmapped) pushed under ``key`` in ``dagrun``, as Airflow stored it."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        row = (
            session.query(XComModel)
            .filter(
                XComModel.dag_id == dagrun.dag_id,
                XComModel.run_id == dagrun.run_id,
                XComModel.task_id == task_id,
                XComModel.key == key,
            )
            .one()
        )
        return XComModel.deserialize_value(row)
