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
