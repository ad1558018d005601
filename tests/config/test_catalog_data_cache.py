"""Each catalog file's data is read from YAML once and kept as JSON in the state folder, named
by the file's content (``config.catalog``): a task process loads a 2,000-pool catalog in a
tenth of the time, and an edit is never read stale."""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path

import pytest
import yaml

from gpufleet.config import catalog as catalog_module
from gpufleet.config.catalog import DATA_CACHE, load_catalog
from gpufleet.errors import CatalogError
from tests.config.test_catalog import VALID, pool, write


@pytest.fixture
def state(tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "state"
    monkeypatch.setenv("GPUFLEET_STATE_DIR", str(folder))
    return folder


def fresh(folder: Path):
    """The catalog as a new task process loads it (nothing kept in this process)."""
    catalog_module._loaded.clear()
    return load_catalog(folder)


def cached(state: Path, path: Path) -> Path:
    return state / DATA_CACHE / f"{hashlib.sha256(path.read_bytes()).hexdigest()}.json"


def nodes(catalog) -> int:
    return catalog.pool("c1", "p1").pool.nodes


def test_a_file_read_once_is_read_from_its_json_after(tmp_path, state):
    fleet = tmp_path / "fleet"
    fleet.mkdir()
    path = write(fleet, VALID)
    first = fresh(fleet)
    kept = cached(state, path)
    assert json.loads(kept.read_text()) == yaml.safe_load(path.read_text())
    # what a later process reads is the kept data (changed here to see it): not the YAML again
    data = json.loads(kept.read_text())
    pool(data)["nodes"] = 5
    kept.write_text(json.dumps(data))
    assert nodes(first) == 4 and nodes(fresh(fleet)) == 5


def test_an_edit_is_read_from_the_yaml_not_stale(tmp_path, state):
    fleet = tmp_path / "fleet"
    fleet.mkdir()
    write(fleet, VALID)
    assert nodes(fresh(fleet)) == 4
    doc = copy.deepcopy(VALID)
    pool(doc)["nodes"] = 6
    path = write(fleet, doc)
    assert nodes(fresh(fleet)) == 6
    assert len(list((state / DATA_CACHE).glob("*.json"))) == 2 and cached(state, path).exists()


def test_a_broken_cache_file_is_read_past_and_replaced(tmp_path, state):
    fleet = tmp_path / "fleet"
    fleet.mkdir()
    path = write(fleet, VALID)
    fresh(fleet)
    cached(state, path).write_text('{"regions": [')  # cut short
    assert nodes(fresh(fleet)) == 4
    assert json.loads(cached(state, path).read_text()) == yaml.safe_load(path.read_text())


@pytest.mark.parametrize(
    "old,new,where",
    [
        ("name: p1", "name: 2026-01-01", "node_pools[0].name"),  # a date
        ("mimics: gke", "mimics: gke\n      faults: {1: [rdma-down]}", "sim.faults"),  # an int key
    ],
)
def test_data_json_would_change_is_never_cached(tmp_path, state, old, new, where):
    """YAML reads an unquoted date as a date and ``1:`` as an integer key; JSON would give back
    a string for either, and the catalog's checks would see something else than the file says.
    Such a file is read as YAML each time: the same error each time, nothing kept."""
    fleet = tmp_path / "fleet"
    fleet.mkdir()
    text = yaml.safe_dump(VALID).replace(old, new)
    assert text != yaml.safe_dump(VALID)
    (fleet / "fleet.yaml").write_text(text)
    errors = []
    for _ in range(2):
        with pytest.raises(CatalogError) as err:
            fresh(fleet)
        errors.append(str(err.value))
    assert errors[0] == errors[1] and where in errors[0]
    assert not list((state / DATA_CACHE).glob("*.json"))


def test_a_duplicate_key_is_refused_every_time(tmp_path, state):
    fleet = tmp_path / "fleet"
    fleet.mkdir()
    text = yaml.safe_dump(VALID).replace("nodes: 4", "nodes: 4\n      nodes: 8")
    (fleet / "fleet.yaml").write_text(text)
    for _ in range(2):
        with pytest.raises(CatalogError, match="duplicate key 'nodes'"):
            fresh(fleet)


def test_a_state_folder_that_cannot_be_written_only_costs_time(tmp_path, monkeypatch):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    monkeypatch.setenv("GPUFLEET_STATE_DIR", str(blocker / "state"))
    fleet = tmp_path / "fleet"
    fleet.mkdir()
    write(fleet, VALID)
    assert nodes(fresh(fleet)) == 4 and nodes(fresh(fleet)) == 4


def test_only_the_newest_files_are_kept(tmp_path, state, monkeypatch):
    monkeypatch.setattr(catalog_module, "_DATA_KEEP", 2)
    fleet = tmp_path / "fleet"
    fleet.mkdir()
    paths = []
    for count in (4, 5, 6):
        doc = copy.deepcopy(VALID)
        pool(doc)["nodes"] = count
        paths.append(write(fleet, doc))
        body = paths[-1].read_bytes()
        fresh(fleet)
        paths[-1] = body
    kept = {p.name for p in (state / DATA_CACHE).glob("*.json")}
    assert kept == {f"{hashlib.sha256(b).hexdigest()}.json" for b in paths[1:]}
