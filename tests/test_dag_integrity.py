"""Every DAG file imports cleanly, is documented and owned, retries, and does no I/O at import
beyond reading the fleet catalog (no network, no database, no Variables or connections)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DAG_FILES = sorted(p for p in (ROOT / "dags").glob("*.py") if not p.name.startswith("_"))


@pytest.fixture(scope="module")
def dagbag(airflow_db):
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(ROOT / "dags"))


def test_there_are_dags():
    assert DAG_FILES, "no DAG files found"


def test_every_dag_file_imports_without_errors(dagbag):
    assert dagbag.import_errors == {}
    assert {Path(d.fileloc).stem for d in dagbag.dags.values()} == {p.stem for p in DAG_FILES}


def test_dags_are_documented_owned_tagged_and_retry(dagbag):
    for dag_id, dag in dagbag.dags.items():
        assert dag.doc_md and len(dag.doc_md) > 200, f"{dag_id}: doc_md"
        assert "gpufleet" in dag.tags, f"{dag_id}: tags"
        assert dag.catchup is False, f"{dag_id}: catchup"
        assert dag.default_args.get("owner") == "gpufleet-platform", f"{dag_id}: owner"
        assert dag.default_args.get("retries", 0) >= 1, f"{dag_id}: retries"
        assert dag.default_args.get("retry_exponential_backoff"), f"{dag_id}: backoff"
        assert dag.default_args.get("on_failure_callback"), f"{dag_id}: alerting"
        for task in dag.tasks:
            assert task.owner == "gpufleet-platform", f"{dag_id}.{task.task_id}: owner"
        for name, _param in dag.params.items():
            schema = dag.params.get_param(name).schema
            assert schema.get("type"), f"{dag_id}: param {name} has no JSON schema type"


def test_every_mapped_task_names_its_instances(dagbag):
    """A mapped task's instances show a name in the UI (``map_index_template``: the pool a
    validation checks), not a bare index someone must look up."""
    from airflow.sdk.definitions.mappedoperator import MappedOperator

    mapped = [
        (dag_id, task)
        for dag_id, dag in dagbag.dags.items()
        for task in dag.tasks
        if isinstance(task, MappedOperator)
    ]
    assert mapped, "no mapped task found"
    for dag_id, task in mapped:
        template = task.partial_kwargs.get("map_index_template")
        assert template, f"{dag_id}.{task.task_id}: no map_index_template"


def test_a_dag_whose_tasks_run_after_a_failure_fails_through_its_watcher(dagbag):
    """Airflow's ``watcher()`` idiom: where a task runs after an upstream failure (a report, a
    release, a teardown) and can succeed, a ``one_failed`` watcher downstream of every task
    (but setups, which Airflow allows only ``all_success`` after them) fails the run."""
    watched = 0
    for dag_id, dag in dagbag.dags.items():
        lenient = [
            t for t in dag.tasks if t.trigger_rule != "all_success" and t.task_id != "watcher"
        ]
        if not lenient:
            continue
        watched += 1
        assert "watcher" in dag.task_dict, f"{dag_id}: {lenient[0].task_id} runs after failures"
        watcher = dag.task_dict["watcher"]
        assert watcher.trigger_rule == "one_failed" and watcher.retries == 0, dag_id
        others = {t.task_id for t in dag.tasks if t is not watcher and not t.is_setup}
        assert watcher.upstream_task_ids == others, f"{dag_id}: watcher not after every task"
    assert watched >= 4


def test_the_validation_sub_graph_is_one_task_group_everywhere(dagbag):
    """Every DAG that validates pools builds the same sub-graph (``dagkit.validation``)."""
    from gpufleet.airflow.assets import POOL_VALIDATED

    validating = [d for d in dagbag.dags.values() if "validate_fabric" in d.task_dict]
    assert {d.dag_id for d in validating} >= {
        "nightly_fabric_validation",
        "region_onboarding",
        "reservation_transition",
    }
    for dag in validating:
        group = dag.task_group_dict["validation"]
        ids = {"fabric_targets", "storage_targets", "validate_fabric", "validate_storage"}
        assert ids <= set(group.children), dag.dag_id
        fabric = dag.task_dict["validate_fabric"]
        assert fabric.upstream_task_ids == {"fabric_targets"}, dag.dag_id
        assert fabric.partial_kwargs["outlets"] == [POOL_VALIDATED], dag.dag_id


def test_a_transition_action_is_a_branch_over_every_action(dagbag):
    """The transition's ``action`` is chosen by a branch (Airflow skips the other actions'
    tasks), never by tasks skipping themselves: one branch per value the form allows."""
    from airflow.sdk import BranchMixIn

    dag = dagbag.dags["reservation_transition"]
    branch = dag.task_dict["action"]
    assert isinstance(branch, BranchMixIn) and branch.inherits_from_skipmixin
    allowed = dag.params.get_param("action").schema["enum"]
    assert sorted(branch.branches) == sorted(allowed)
    for followed in branch.branches.values():
        assert set(followed) <= branch.downstream_task_ids
    assert "watcher" in branch.downstream_task_ids  # kept by every branch (WatchedBranchMixIn)


DRILL = "sim_fault_drill"


def test_sim_faults_are_in_the_sim_drills_form_and_no_production_form(dagbag):
    """Faults are a rehearsal, not a production setting: only ``sim_fault_drill`` takes them,
    and no other DAG's form, task or planned conf carries the field."""
    assert "sim_faults" in dagbag.dags[DRILL].params
    production = {d: dag for d, dag in dagbag.dags.items() if d != DRILL}
    assert production
    for dag_id, dag in production.items():
        assert "sim_faults" not in dag.params, f"{dag_id}: sim_faults in a production form"
        for task in dag.tasks:
            fields = getattr(task, "template_fields", ())
            assert "sim_faults" not in fields, f"{dag_id}.{task.task_id} takes sim_faults"
            assert not hasattr(task, "sim_faults"), f"{dag_id}.{task.task_id} takes sim_faults"


def test_the_sim_drill_injects_validates_and_clears_as_setup_and_teardown(dagbag):
    """The drill's faults are a setup and a teardown around the nightly's own validation."""
    dag = dagbag.dags[DRILL]
    inject, clear = dag.task_dict["inject_faults"], dag.task_dict["clear_faults"]
    assert inject.is_setup and clear.is_teardown and inject.task_id in clear.upstream_task_ids
    assert dag.task_dict["fabric_targets"].upstream_task_ids == {"inject_faults"}
    assert dag.task_dict["report"].task_id in clear.upstream_task_ids
    nightly = dagbag.dags["nightly_fabric_validation"]
    assert set(nightly.task_group_dict["validation"].children) == set(
        dag.task_group_dict["validation"].children
    )
    # its clusters are the catalog's sim ones
    from gpufleet.config.catalog import load_catalog

    sim = {n for n, (_r, c) in load_catalog().clusters.items() if c.provider == "sim"}
    assert sim and set(dag.params.get_param("clusters").schema["items"]["enum"]) == sim


@pytest.mark.parametrize("sim", [True, False], ids=["sim-catalog", "no-sim-cluster"])
def test_the_sim_drill_exists_only_where_the_sim_is_a_backend(sim, tmp_path, monkeypatch):
    """A fleet with no ``provider: sim`` cluster has no drill DAG (and no form with faults)."""
    import shutil

    import yaml
    from airflow.dag_processing.dagbag import DagBag

    catalog = tmp_path / "fleet"
    catalog.mkdir()
    gke = yaml.safe_load((ROOT / "include" / "fleet-examples" / "gke-a3-ultra.yaml").read_text())
    if sim:  # beside the sim's own file, which sets the GPU models' settings once
        shutil.copy(ROOT / "include" / "fleet" / "sim.yaml", catalog)
        gke.pop("gpu_models", None)
    (catalog / "gke-a3-ultra.yaml").write_text(yaml.safe_dump(gke))
    monkeypatch.setenv("GPUFLEET_CATALOG_DIR", str(catalog))
    monkeypatch.setenv("GPUFLEET_STATE_DIR", str(tmp_path / "state"))
    bag = DagBag(dag_folder=str(ROOT / "dags"))
    assert bag.import_errors == {}
    assert (DRILL in bag.dags) is sim
    assert not any("sim_faults" in d.params for i, d in bag.dags.items() if i != DRILL)
    if sim:  # the real clusters are not the drill's to validate

        def clusters(dag_id: str) -> set[str]:
            return set(bag.dags[dag_id].params.get_param("clusters").schema["items"]["enum"])

        drill, every = clusters(DRILL), clusters("nightly_fabric_validation")
        assert drill and drill < every  # the gke example's clusters are left out
        # and a run that names no cluster validates the sim ones, never all
        dag = bag.dags[DRILL]
        for task_id in ("inject_faults", "fabric_targets", "storage_targets"):
            task = dag.task_dict[task_id]
            jinja = dag.get_template_env()  # native: the rendered value is a list
            empty = jinja.from_string(task.clusters).render(params={"clusters": []})
            assert set(empty) == drill, task_id


def test_every_param_is_declared_one_way(dagbag):
    """Every form field is built by ``dagkit.param`` (the draft-07 dialect, NaN refused)."""
    from gpufleet.airflow.dagkit import SCHEMA_DIALECT

    for dag_id, dag in dagbag.dags.items():
        for name in dag.params:
            schema = dag.params.get_param(name).schema
            assert schema.get("$schema") == SCHEMA_DIALECT, f"{dag_id}: param {name}"


_PROBE = r"""
import json, os, socket, sys
import airflow.sdk  # Airflow's own start-up (config files) is not the DAG's business
import gpufleet.airflow.dagkit, gpufleet.airflow.operators  # noqa: F401 - modules, not I/O
events = []
def hook(event, args):
    if event == "open" and isinstance(args[0], (str, bytes)):
        events.append(("open", os.fsdecode(args[0])))
    elif event in ("socket.connect", "socket.getaddrinfo", "sqlite3.connect"):
        events.append((event, repr(args[1] if len(args) > 1 else args)))
sys.addaudithook(hook)
import runpy
runpy.run_path(sys.argv[1], run_name="dag_under_test")
print("EVENTS=" + json.dumps(events))
"""


@pytest.mark.parametrize("dag_file", DAG_FILES, ids=lambda p: p.name)
def test_no_io_at_import(dag_file, airflow_db, tmp_path, monkeypatch):
    from gpufleet.config.catalog_index import catalog_index

    env = {**os.environ, "GPUFLEET_STATE_DIR": str(tmp_path / "state")}
    # the catalog index cache built here (as the dag-processor's first parse builds it); the
    # probe's parse is the warm one the dag-processor repeats
    monkeypatch.setenv("GPUFLEET_STATE_DIR", env["GPUFLEET_STATE_DIR"])
    catalog_index()
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE, str(dag_file)],
        env=env,
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    events = json.loads(proc.stdout.split("EVENTS=", 1)[1])
    allowed_roots = (
        str(ROOT / "include" / "fleet"),
        str(tmp_path / "state"),
        sys.prefix,
        str(ROOT / "plugins"),
        str(ROOT / "dags"),
        "/usr/lib/python3",
        os.path.dirname(os.__file__),
        "/dev/null",
    )
    unexpected = [e for e in events if e[0] != "open" or not e[1].startswith(allowed_roots)]
    assert unexpected == [], f"{dag_file.name} did I/O at import: {unexpected[:5]}"
    opened = [path for _, path in events]
    assert not any(p.endswith((".yaml", ".yml")) for p in opened), (
        "the warm parse must use the catalog index cache, not re-read the YAML"
    )
