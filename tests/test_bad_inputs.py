"""The bad-input corpus (tests/data/bad_inputs, see its README): every CLI input refused with
exit 2 and one line, no traceback, nothing changed; every broken catalog named; every bad DAG
conf refused by Airflow's own Param validation, naming the field."""

from __future__ import annotations

import copy
import hashlib
import io
import json
import shutil
import sqlite3
import sys
from pathlib import Path

import pytest

from gpufleet.cli import main
from gpufleet.store import default_ledger_url

DATA = Path(__file__).parent / "data" / "bad_inputs"
CLI_CASES = sorted((DATA / "cli").glob("*.json"))
CATALOG_CASES = sorted(p for p in (DATA / "catalog").iterdir() if p.suffix in (".yaml", ".bin"))
PARAM_CASES = sorted((DATA / "params").glob("*.json"))

# a well-formed launch conf (docs/ci-trigger.md); each params case changes one field of it
LAUNCH_CONF = {
    "cluster": "a3u-sim",
    "pools": ["h200-a"],
    "nodes": 2,
    "gpus_per_node": 8,
    "job_name": "llm-finetune",
    "namespace": "ml-team",
    "image": "us-docker.pkg.dev/example/train:1.4",
    "command": ["torchrun", "train.py"],
}
# each DAG's well-formed conf for the params cases (the DAGs without one take their defaults)
BASE_CONFS = {
    "gated_training_launch": LAUNCH_CONF,
    "reservation_transition": {"cluster": "a3u-sim", "old_pool": "h200-b", "new_pool": "h200-c"},
    "region_onboarding": {"region": "sim-us-central1"},
}


def test_the_corpus_is_large_enough():
    assert len(CLI_CASES) + len(CATALOG_CASES) + len(PARAM_CASES) >= 60


@pytest.fixture(scope="module")
def primed_state(tmp_path_factory) -> Path:
    """A state folder where the simulated fleet and the ledger exist (so 'nothing changed'
    compares real databases), built once through the CLI itself."""
    state = tmp_path_factory.mktemp("primed")
    mp = pytest.MonkeyPatch()
    mp.setenv("GPUFLEET_STATE_DIR", str(state))
    mp.delenv("GPUFLEET_LEDGER_URL", raising=False)
    try:
        assert main(["sim", "show"]) == 0
        assert main(["gate", "--cluster", "a3u-sim", "--pool", "h200-a", "--nodes", "1"]) in (0, 1)
    finally:
        mp.undo()
    return state


def _snapshot(state: Path) -> dict[str, str]:
    """Every database in the state folder, row by row (or its bytes when it is not SQLite)."""
    out = {}
    for db in sorted(state.glob("*.db")):
        digest = hashlib.sha256()
        try:
            conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
            try:
                tables = [
                    r[0]
                    for r in conn.execute(
                        "SELECT name FROM sqlite_master WHERE type='table' ORDER BY name"
                    )
                ]
                for table in tables:
                    for row in sorted(map(repr, conn.execute(f'SELECT * FROM "{table}"'))):
                        digest.update(f"{table}:{row}".encode())
            finally:
                conn.close()
        except sqlite3.DatabaseError:
            digest.update(db.read_bytes())
        out[db.name] = digest.hexdigest()
    return out


def _materialise(spec, path: Path) -> None:
    if isinstance(spec, str):
        path.write_text(spec)
    elif "hex" in spec:
        path.write_bytes(bytes.fromhex(spec["hex"]))
    else:
        path.write_text(
            spec.get("prefix", "") + spec["repeat"] * spec["times"] + spec.get("suffix", "")
        )


def _run(argv: list[str], capsys, monkeypatch, stdin: str = "") -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin.encode())))
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's own exit
        code = exc.code if isinstance(exc.code, int) else 2
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _assert_one_line_refusal(code: int, out: str, err: str, expect: str | None = None) -> None:
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2, f"exit {code}; stderr: {err!r}"
    assert "Traceback" not in err + out
    assert len(lines) == 1, f"expected one line on stderr, got {len(lines)}: {err[:2000]!r}"
    assert len(lines[0]) <= 600, lines[0]
    if expect:
        assert expect.lower() in lines[0].lower(), lines[0]


@pytest.mark.parametrize("case", CLI_CASES, ids=lambda p: p.stem)
def test_cli_refuses_bad_input(case, primed_state, tmp_path, capsys, monkeypatch):
    spec = json.loads(case.read_text())
    state = tmp_path / "state"
    shutil.copytree(primed_state, state)
    monkeypatch.setenv("GPUFLEET_STATE_DIR", str(state))
    monkeypatch.delenv("GPUFLEET_LEDGER_URL", raising=False)
    if not {"GPUFLEET_LEDGER_URL", "AIRFLOW_CONN_GPUFLEET_LEDGER"} & (spec.get("env") or {}).keys():
        # the state folder's ledger named directly, the one Airflow's lookup finds here: that
        # lookup starts an `airflow` process per command (seconds) and is proven in
        # tests/store/test_ledger_resolution.py and
        # test_gate_and_status_name_the_fleet_state_they_read;
        # the cases about the ledger's location name it themselves, as they did
        monkeypatch.setenv("GPUFLEET_LEDGER_URL", default_ledger_url())
    for key, value in (spec.get("env") or {}).items():  # {tmp}: the scratch folder; {state}
        monkeypatch.setenv(
            key, value.replace("{tmp}", str(tmp_path)).replace("{state}", str(state))
        )
    for name, content in (spec.get("files") or {}).items():
        _materialise(content, tmp_path / name)
    if spec.get("corrupt"):  # the database and its write-ahead log (which holds its pages)
        (state / spec["corrupt"]).write_bytes(b"this is not a database " * 100)
        for suffix in ("-wal", "-shm"):
            (state / (spec["corrupt"] + suffix)).unlink(missing_ok=True)
    before = _snapshot(state)
    argv = [a.replace("{tmp}", str(tmp_path)) for a in spec["args"]]
    code, out, err = _run(argv, capsys, monkeypatch, spec.get("stdin", ""))
    _assert_one_line_refusal(code, out, err, spec.get("expect"))
    if spec.get("secret"):
        assert spec["secret"] not in out + err
    assert _snapshot(state) == before, "a refused input changed the ledger or the sim fleet"


def _expected(case: Path) -> str | None:
    first = case.read_bytes().split(b"\n", 1)[0].decode("ascii", "replace")
    return first.removeprefix("# expect:").strip() if first.startswith("# expect:") else None


@pytest.mark.parametrize("case", CATALOG_CASES, ids=lambda p: p.name)
def test_catalog_check_names_the_broken_file(case, tmp_path, capsys, monkeypatch):
    path = tmp_path / (case.stem + ".yaml")
    shutil.copyfile(case, path)
    code, out, err = _run(["catalog", "check", str(path)], capsys, monkeypatch)
    assert code == 2 and "Traceback" not in out + err
    problems = [line for line in err.splitlines() if line.startswith(str(path))]
    assert problems, err
    if _expected(case):
        assert _expected(case).lower() in err.lower(), err


@pytest.mark.parametrize("case", CATALOG_CASES, ids=lambda p: p.name)
def test_a_broken_catalog_stops_every_command_with_one_line(
    case, primed_state, tmp_path, capsys, monkeypatch
):
    folder = tmp_path / "fleet"
    folder.mkdir()
    shutil.copyfile(case, folder / (case.stem + ".yaml"))
    state = tmp_path / "state"
    shutil.copytree(primed_state, state)
    monkeypatch.setenv("GPUFLEET_STATE_DIR", str(state))
    monkeypatch.setenv("GPUFLEET_CATALOG_DIR", str(folder))
    monkeypatch.delenv("GPUFLEET_LEDGER_URL", raising=False)
    before = _snapshot(state)
    for argv in (
        ["gate", "--cluster", "a3u-sim", "--pool", "h200-a", "--nodes", "1"],
        ["status"],
        ["sim", "show"],
    ):
        code, out, err = _run(argv, capsys, monkeypatch)
        _assert_one_line_refusal(code, out, err)
        assert case.stem + ".yaml" in err
    assert _snapshot(state) == before


@pytest.fixture(scope="module")
def dags():
    from airflow.dag_processing.dagbag import DagBag
    from airflow.serialization.serialized_objects import DagSerialization

    bag = DagBag(dag_folder=str(Path(__file__).parents[1] / "dags"))
    assert not bag.import_errors, bag.import_errors
    # what the api-server and scheduler hold: the serialized DAG, whose create_dagrun
    # validates a run's conf with params.deep_merge(conf).validate()
    return {
        d: DagSerialization.from_dict(DagSerialization.to_dict(dag)) for d, dag in bag.dags.items()
    }


def _validate(dag, conf: dict) -> None:
    dag.params.deep_merge(conf).validate()


@pytest.mark.parametrize("case", PARAM_CASES, ids=lambda p: p.stem)
def test_airflow_param_validation_refuses_bad_conf_naming_the_field(case, dags):
    from airflow.exceptions import ParamValidationError

    spec = json.loads(case.read_text())
    dag = dags[spec["dag"]]
    base = copy.deepcopy(BASE_CONFS.get(spec["dag"], {}))
    _validate(dag, base)  # the untouched conf is accepted: the refusal is about the field
    with pytest.raises(ParamValidationError) as err:
        _validate(dag, {**base, **spec["conf"]})
    assert f"param {spec['field']}" in str(err.value), str(err.value)
