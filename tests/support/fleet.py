"""Helpers for end-to-end tests on the simulated fleet."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def get_dag(dag_id: str):
    """The DAG as the dag-processor loads it, parsed afresh (a run's conf must not leak into
    the next run through a shared DAG object)."""
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(ROOT / "dags" / f"{dag_id}.py"))
    assert not bag.import_errors, bag.import_errors
    return bag.dags[dag_id]


def run_dag(dag_id: str, conf: dict | None = None):
    """``dag.test()``: every task in this process, triggers inline. Returns the DagRun."""
    return get_dag(dag_id).test(run_conf=conf or {})


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


def validate(cluster: str, pool: str, run_id: str = "seed", storage: bool = True) -> dict:
    """Run a real fabric (and storage) validation of one sim pool through the services; the
    summaries as the operators hand them to XCom (``to_dict``)."""
    from gpufleet.config.catalog import load_catalog
    from gpufleet.services.fabric import FabricValidation
    from gpufleet.services.storage import StorageValidation
    from gpufleet.store import Ledger

    ref = load_catalog().pool(cluster, pool)
    ledger = Ledger()
    svc = FabricValidation(ref, ledger)
    state = svc.begin(run_id)
    while state.workload:
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


def _wait(backend, wl, timeout: float = 600, step: float = 0.1) -> None:
    """Until the ``Workload`` is done, advancing the sim's clock ``step`` seconds at a time
    (``timeout``: in simulated seconds; no wall-clock wait)."""
    from gpufleet.services.drain import backend_clock

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
