"""``gpufleet trigger`` against a real Airflow 3 (api-server, scheduler, dag-processor, triggerer).

Every case runs the CLI against the session's one live Airflow (``tests/live/conftest.py``: the
repo's DAGs and ``tests/live/dags/ci_probe.py``, on a simulated fleet of its own). The cases
that run a DAG to its end as CI does (success, a failed run's exit 1, the training launch:
``gpufleet trigger gated_training_launch --conf ... --wait``) start ``python -m gpufleet
trigger ...`` in a subprocess; the refusals run ``gpufleet.cli.main``, the code ``python -m
gpufleet`` runs (``sys.exit(main())``), in this process (``trigger_here``): the same REST calls,
exit code and one line on stderr, without a Python start per case (1 to 5 s on a busy 2-core
machine).

The order is the module's: the refusals (no run) first, then the cases that run ``ci_probe``,
while the nightly Airflow scheduled when the DAGs were unpaused runs beside them on the workers;
then that nightly's case (its in-process reference run first); then the training launch, the
triggerer's restart and the Celery worker's SIGKILL, which need the pools the nightly validates
to themselves (a validation skips a pool another run is validating); the event path last (its
faults quarantine nodes).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.live.airflow_live import PLUGINS_DIR, VIEWER, LiveAirflow

pytestmark = [pytest.mark.slow, pytest.mark.live]

DAG = "ci_probe"


def gpufleet(
    airflow: LiveAirflow, *args: str, timeout: float = 120, **env: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpufleet", "trigger", *args],
        env=airflow.cli_env(**env),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=PLUGINS_DIR.parent,
        check=False,
    )


def field(stdout: str, key: str) -> str:
    """The value of a ``key: value`` line the CLI printed."""
    for line in stdout.splitlines():
        if line.startswith(f"{key}: "):
            return line.split(": ", 1)[1]
    raise AssertionError(f"no {key!r} line in:\n{stdout}")


def explain(result: subprocess.CompletedProcess[str]) -> str:
    return f"exit {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"


@pytest.fixture
def trigger_here(airflow: LiveAirflow, monkeypatch, capsys):
    """``gpufleet trigger ARGS`` in this process, aimed at the live Airflow as ``gpufleet()``
    aims the subprocess (``airflow.cli_env``: URL, user and password in the environment);
    its exit code, stdout and stderr as a ``CompletedProcess``."""
    from gpufleet.cli import main

    def run(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
        wanted = {
            k: v for k, v in airflow.cli_env(**env).items() if k.startswith("GPUFLEET_AIRFLOW_")
        }
        with monkeypatch.context() as patch:
            for key in [k for k in os.environ if k.startswith("GPUFLEET_AIRFLOW_")]:
                patch.delenv(key)
            for key, value in wanted.items():
                patch.setenv(key, value)
            capsys.readouterr()
            try:
                code = main(["trigger", *args])
            except SystemExit as exc:  # argparse's usage errors exit, as in the process
                code = exc.code if isinstance(exc.code, int) else 2
            out, err = capsys.readouterr()
        return subprocess.CompletedProcess(["gpufleet", "trigger", *args], code, out, err)

    return run


# --- refusals: no run is created (the CLI in this process) ----------------------------------


def test_param_violation_names_the_param(trigger_here) -> None:
    result = trigger_here(DAG, "--conf", '{"nodes": 99}')
    assert result.returncode == 2, explain(result)
    message = result.stderr.strip()
    assert len(message.splitlines()) == 1
    assert "conf.nodes: 99 is greater than the maximum of 4" in message
    assert "(400)" in message
    assert result.stdout == ""


def test_wrong_type_names_the_param(trigger_here) -> None:
    result = trigger_here(DAG, "--conf", '{"should_fail": "yes"}')
    assert result.returncode == 2, explain(result)
    assert "conf.should_fail: 'yes' is not of type 'boolean'" in result.stderr


def test_wrong_password(airflow: LiveAirflow, trigger_here) -> None:
    result = trigger_here(DAG, GPUFLEET_AIRFLOW_PASSWORD="not-the-password")
    assert result.returncode == 2, explain(result)
    assert f"authentication failed for user 'ci' at {airflow.url}" in result.stderr
    assert "GPUFLEET_AIRFLOW_PASSWORD" in result.stderr


def test_viewer_may_not_trigger(airflow: LiveAirflow, trigger_here) -> None:
    # --password=...: a generated password may start with "-", which argparse would take for
    # an option after a bare --password
    result = trigger_here(DAG, "--user", VIEWER, f"--password={airflow.viewer_password}")
    assert result.returncode == 2, explain(result)
    assert f"user '{VIEWER}' may not POST /api/v2/dags/{DAG}/dagRuns" in result.stderr


def test_unknown_dag(trigger_here) -> None:
    result = trigger_here("no_such_dag", "--conf", "{}")
    assert result.returncode == 2, explain(result)
    assert "DAG 'no_such_dag' not found" in result.stderr
    assert "is it parsed? is the name right?" in result.stderr


def test_invalid_conf_refused_before_any_http_call(trigger_here) -> None:
    # port 9 (discard) has no Airflow: an HTTP call would fail with "cannot reach"
    for conf, expected in (
        ("{nodes: 2}", "--conf is not valid JSON"),
        ("[1, 2]", "--conf must be a JSON object"),
        ("@/nonexistent/conf.json", "cannot read --conf file"),
    ):
        result = trigger_here(DAG, "--conf", conf, "--url", "http://127.0.0.1:9")
        assert result.returncode == 2, explain(result)
        assert expected in result.stderr
        assert "cannot reach" not in result.stderr


def _param_cases() -> list[Path]:
    from tests.test_bad_inputs import PARAM_CASES

    return PARAM_CASES


@pytest.mark.parametrize("case", _param_cases(), ids=lambda p: p.stem)
def test_a_bad_conf_for_a_gpufleet_dag_is_refused_naming_the_param_and_no_run_exists(
    airflow: LiveAirflow, case: Path, capsys, monkeypatch
) -> None:
    """The params corpus through the REST API: Airflow's Param validation refuses the conf
    (exit 2, one line naming the field) and the run was never created. A non-finite number is
    refused by the CLI before it is sent (JSON has no NaN), naming the field the same way.
    The CLI runs in this process (``gpufleet.cli.main``, the code ``python -m gpufleet``
    runs): the REST calls are the real ones, without a Python start per case."""
    from gpufleet.cli import main
    from tests.test_bad_inputs import BASE_CONFS

    spec = json.loads(case.read_text())
    base = dict(BASE_CONFS.get(spec["dag"], {}))  # a conf the DAG accepts, but for the field
    run_id = f"bad-conf-{case.stem}"
    conf = json.dumps({**base, **spec["conf"]})
    for key, value in airflow.cli_env().items():
        if key.startswith("GPUFLEET_AIRFLOW_"):
            monkeypatch.setenv(key, value)
    code = main(["trigger", spec["dag"], "--conf", conf, "--run-id", run_id])
    out, err = capsys.readouterr()
    assert code == 2, (code, out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert f"conf.{spec['field']}:" in lines[0], lines[0]
    assert "Traceback" not in out + err and out == ""
    run = airflow.request("GET", f"/api/v2/dags/{spec['dag']}/dagRuns/{_quoted(run_id)}")
    assert run.status_code == 404, run.text


def _quoted(run_id: str) -> str:
    from urllib.parse import quote

    return quote(run_id, safe="")


LAUNCH = "gated_training_launch"


def launch_conf(**overrides) -> str:
    body = {
        "cluster": "a3u-sim",
        "pools": ["h200-a"],
        "nodes": 2,
        "gpus_per_node": 8,
        "job_name": "ci-finetune",
        "namespace": "ml-ci",
        "image": "example/train:1",
        "command": ["torchrun", "train.py"],
    }
    body.update(overrides)
    return json.dumps(body)


def test_a_bad_launch_conf_gets_the_api_refusal_naming_the_field(trigger_here):
    result = trigger_here(LAUNCH, "--conf", launch_conf(nodes=99), "--unpause")
    assert result.returncode == 2
    assert "nodes" in result.stderr and "99" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    bad_name = trigger_here(LAUNCH, "--conf", launch_conf(job_name="Not_A_DNS_Name"))
    assert bad_name.returncode == 2 and "job_name" in bad_name.stderr


@contextlib.contextmanager
def live_fleet(airflow: LiveAirflow, path: Path):
    """Point this process at the live Airflow's sim fleet (``path``) and ledger (its
    ``GPUFLEET_LEDGER_URL`` when it has one: the Celery deployment's PostgreSQL ledger) for a
    moment."""
    wanted = {"GPUFLEET_STATE_DIR": str(path)}
    if airflow.env.get("GPUFLEET_LEDGER_URL"):
        wanted["GPUFLEET_LEDGER_URL"] = airflow.env["GPUFLEET_LEDGER_URL"]
    before = {key: os.environ.get(key) for key in wanted}
    os.environ.update(wanted)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@pytest.fixture(scope="module")
def validated(airflow, live_fleet_dir):
    """A real validation of a3u-sim/h200-a in the live Airflow's sim fleet and ledger."""
    from tests.support.fleet import validate

    with live_fleet(airflow, live_fleet_dir):
        assert validate("a3u-sim", "h200-a")["passed"]


# --- the deployment the project ships: CeleryExecutor (issue 18) -----------------------------
# The session's live Airflow runs CeleryExecutor with two workers whenever PostgreSQL and Redis
# answer (always in CI). The scheduled nightly's case follows the ci_probe runs (the nightly
# started when the DAGs were unpaused); the triggerer's restart and the worker's SIGKILL last.

NIGHTLY = "nightly_fabric_validation"
PLANNER = "nightly_fleet_validation"
TERMINAL = ("success", "failed")


def _celery(airflow: LiveAirflow) -> None:
    if airflow.executor != "CeleryExecutor":
        pytest.skip(f"this live Airflow runs {airflow.executor} (no PostgreSQL or Redis here)")


def _runs(airflow: LiveAirflow, dag_id: str) -> list[dict]:
    response = airflow.request("GET", f"/api/v2/dags/{dag_id}/dagRuns", params={"limit": 100})
    response.raise_for_status()
    return response.json()["dag_runs"]


def _trigger(airflow: LiveAirflow, dag_id: str, run_id: str, conf: dict) -> None:
    response = airflow.request(
        "POST",
        f"/api/v2/dags/{dag_id}/dagRuns",
        json={"dag_run_id": run_id, "logical_date": None, "conf": conf},
    )
    assert response.status_code == 200, response.text


def _task_instances(airflow: LiveAirflow, dag_id: str, run_id: str) -> list[dict]:
    response = airflow.request(
        "GET", f"/api/v2/dags/{dag_id}/dagRuns/{_quoted(run_id)}/taskInstances"
    )
    response.raise_for_status()
    return response.json()["task_instances"]


def _until(what: str, check, airflow: LiveAirflow, timeout: float = 180.0, step: float = 0.5):
    """Poll ``check()`` until it returns something truthy (that value), checking the
    components stay up; fail naming ``what`` after ``timeout`` seconds (wall clock: a live
    deployment's own time)."""
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        airflow.check_alive()
        value = check()
        if value:
            return value
        time.sleep(step)
    raise AssertionError(f"{what}: not within {timeout:g}s\n{airflow.log_tails(20)}")


def _finished(airflow: LiveAirflow, dag_id: str, run_id: str, timeout: float = 240.0) -> str:
    def state():
        run = airflow.request("GET", f"/api/v2/dags/{dag_id}/dagRuns/{_quoted(run_id)}").json()
        return run["state"] if run["state"] in TERMINAL else None

    return _until(f"{dag_id} run {run_id} finished", state, airflow, timeout)


def _verdicts(rows: list[dict]) -> dict:
    """Each pool's verdicts; a storage verdict without its clients, which depend on which pool
    ran its filesystem's full test tonight (the first to start: an order Celery decides)."""
    return {
        (r["cluster"], r["pool"], r["kind"]): (
            r["verdict"],
            r["transport"],
            r["nodes_tested"] if r["kind"] == "fabric" else None,
        )
        for r in rows
    }


# --- runs: the CLI as CI runs it (beside the scheduled nightly) -------------------------------


def test_success_with_wait(airflow: LiveAirflow) -> None:
    result = gpufleet(airflow, DAG, "--conf", '{"nodes": 3}', "--wait", "--poll", "0.5")
    assert result.returncode == 0, explain(result)
    run_id = field(result.stdout, "run_id")
    assert field(result.stdout, "state") == "success"
    assert field(result.stdout, "url") == f"{airflow.url}/dags/{DAG}/runs/" + _quoted(run_id)
    assert "running -> success" in result.stderr  # progress goes to stderr
    # the conf reached Airflow as given, and the run really succeeded there
    run = airflow.request("GET", f"/api/v2/dags/{DAG}/dagRuns/{_quoted(run_id)}").json()
    assert run["state"] == "success"
    assert run["conf"] == {"nodes": 3}


def test_failed_run_exits_1_naming_the_task(airflow: LiveAirflow, tmp_path: Path) -> None:
    conf = tmp_path / "conf.json"
    conf.write_text(json.dumps({"should_fail": True}))
    result = gpufleet(airflow, DAG, "--conf", f"@{conf}", "--wait", "--poll", "0.5")
    assert result.returncode == 1, explain(result)
    assert field(result.stdout, "state") == "failed"
    failed = field(result.stdout, "failed_tasks")
    assert failed.split(", ")[0] == "probe"
    assert "report (upstream_failed)" in failed
    assert "failed tasks: probe" in result.stderr


def test_paused_dag_is_refused_unless_unpause(airflow: LiveAirflow, trigger_here) -> None:
    airflow.request("PATCH", f"/api/v2/dags/{DAG}", json={"is_paused": True}).raise_for_status()
    try:
        refused = trigger_here(DAG)
        assert refused.returncode == 2, explain(refused)
        assert f"DAG '{DAG}' is paused" in refused.stderr
        assert "--unpause" in refused.stderr
        result = trigger_here(DAG, "--unpause", "--wait", "--poll", "0.5")
        assert result.returncode == 0, explain(result)
        assert "unpaused DAG ci_probe" in result.stderr
        assert airflow.request("GET", f"/api/v2/dags/{DAG}").json()["is_paused"] is False
    finally:
        airflow.unpause(DAG)


def test_duplicate_run_id(trigger_here) -> None:
    first = trigger_here(DAG, "--run-id", "ci-duplicate-check")
    assert first.returncode == 0, explain(first)
    assert field(first.stdout, "run_id") == "ci-duplicate-check"
    second = trigger_here(DAG, "--run-id", "ci-duplicate-check")
    assert second.returncode == 2, explain(second)
    assert "already has a run 'ci-duplicate-check'" in second.stderr


def test_wait_timeout_is_an_error(trigger_here) -> None:
    result = trigger_here(DAG, "--wait", "--timeout", "0.2", "--poll", "0.1")
    assert result.returncode == 2, explain(result)
    assert "after 0.2s" in result.stderr
    assert "--timeout" in result.stderr


def test_the_scheduled_nightly_fans_out_per_cluster_on_celery_and_matches_an_in_process_run(
    airflow, live_fleet_dir, airflow_db, fleet_state
):
    """The nightly Airflow scheduled when its DAGs were unpaused, ``nightly_fleet_validation``,
    starts one ``nightly_fabric_validation`` run per cluster, waits for them in the triggerer
    and reports over them: every task on the two Celery workers, to the same verdicts as one
    ``dag.test()`` run over every pool in one process over a fresh copy of the fleet. That
    reference run comes first: this process works on it while the deployment's nightly runs."""
    _celery(airflow)
    from gpufleet.store import Ledger
    from tests.support.fleet import run_dag

    reference = run_dag(NIGHTLY)  # fleet_state: a fresh fleet and SQLite ledger in this process
    assert str(reference.state) == "success"
    in_process = _verdicts(Ledger().validations_for_run(reference.run_id))
    scheduled = _until(
        "the scheduled nightly run", lambda: _runs(airflow, PLANNER), airflow, timeout=60
    )[0]["dag_run_id"]
    assert _finished(airflow, PLANNER, scheduled, timeout=300) == "success"
    children = sorted(
        (r["dag_run_id"], r["state"])
        for r in _runs(airflow, NIGHTLY)
        if r["dag_run_id"].startswith(scheduled + "--")
    )
    assert children == [
        (f"{scheduled}--a3u-sim", "success"),
        (f"{scheduled}--p5-sim", "success"),
    ], children

    with live_fleet(airflow, live_fleet_dir):
        book = Ledger()
        celery_rows = [r for run, _ in children for r in book.validations_for_run(run)]
        on_celery = _verdicts(celery_rows)
    assert on_celery == in_process
    # fabric, storage and the GPU health check of each of the three pools
    assert len(on_celery) == 9 and all(v[0] == "pass" for v in on_celery.values()), on_celery
    # one full Lustre test per filesystem that night: lustre-a3u (two pools) and fsx-p5
    full = sorted(
        (r["cluster"], r["details"]["filesystem"])
        for r in celery_rows
        if r["kind"] == "storage" and r["details"]["scope"] == "filesystem"
    )
    assert full == [("a3u-sim", "lustre-a3u"), ("p5-sim", "fsx-p5")], full


def test_ci_launch_succeeds_and_confirms_the_transport(airflow, validated, live_fleet_dir):
    result = gpufleet(
        airflow,
        LAUNCH,
        "--conf",
        launch_conf(),
        "--wait",
        "--poll",
        "0.5",
        "--unpause",
        timeout=300,
    )
    assert result.returncode == 0, explain(result)
    assert "state: success" in result.stdout
    from gpufleet.store import Ledger

    with live_fleet(airflow, live_fleet_dir):
        launch = Ledger().launches()[0]
    assert (launch["job"], launch["state"], launch["confirmed_transport"]) == (
        "ci-finetune",
        "confirmed",
        "gib",
    )


def test_the_triggerer_restarted_during_a_deferral_resumes_the_validation(airflow, live_fleet_dir):
    """A validation waits on its NCCL pairs in the triggerer; that triggerer dies (SIGKILL) and
    a new one starts: it takes the trigger over and the task resumes on a worker and finishes,
    in its first try. The sim's clock stands still meanwhile, so the pairs cannot finish before
    the restart."""
    _celery(airflow)
    from gpufleet.backends.sim.state import SimState

    run_id = "celery-triggerer-restart"
    with live_fleet(airflow, live_fleet_dir):
        clock = SimState().clock
        clock.freeze()
        try:
            _trigger(airflow, NIGHTLY, run_id, {"pools": ["a3u-sim/h200-b"], "mode": "fabric"})
            _until(
                "validate_fabric deferred",
                lambda: any(
                    t["task_id"] == "validate_fabric" and t["state"] == "deferred"
                    for t in _task_instances(airflow, NIGHTLY, run_id)
                ),
                airflow,
            )
            airflow.kill_component("triggerer")
            airflow.start_component("triggerer")
        finally:
            clock.thaw()
    assert _finished(airflow, NIGHTLY, run_id) == "success"
    fabric = [
        t for t in _task_instances(airflow, NIGHTLY, run_id) if t["task_id"] == "validate_fabric"
    ]
    assert [(t["state"], t["try_number"]) for t in fabric] == [("success", 1)]
    from gpufleet.store import Ledger

    with live_fleet(airflow, live_fleet_dir):
        rows = Ledger().validations_for_run(run_id)
    assert [(r["pool"], r["kind"], r["verdict"]) for r in rows] == [
        ("h200-b", "health", "pass"),  # the GPU health check's row, then the fabric's: once each
        ("h200-b", "fabric", "pass"),
    ]


def test_a_worker_killed_in_the_middle_of_a_validation_is_retried_on_the_other_once(
    airflow, live_fleet_dir
):
    """The worker running a pool's fabric validation is SIGKILLed while the task waits to
    record its verdict (the ledger's validations table is held locked meanwhile, so the kill
    lands there): Airflow finds the task without a heartbeat, retries it on the other worker,
    and the pool's verdict is recorded once."""
    _celery(airflow)
    import psycopg2

    from gpufleet.store import Ledger

    run_id = "celery-worker-killed"
    with live_fleet(airflow, live_fleet_dir):
        Ledger()  # the schema, should no task have written to the ledger yet
    # the nightly runs one at a time (max_active_runs=1): the earlier ones first
    _until(
        "no nightly run in flight",
        lambda: all(r["state"] in TERMINAL for r in _runs(airflow, NIGHTLY)),
        airflow,
        timeout=240,
    )
    ledger_dsn = airflow.env["GPUFLEET_LEDGER_URL"].replace("postgresql+psycopg2", "postgresql")
    holder = psycopg2.connect(ledger_dsn)
    try:
        with holder.cursor() as cur:
            cur.execute("LOCK TABLE gf_validations IN ACCESS EXCLUSIVE MODE")
        _trigger(airflow, NIGHTLY, run_id, {"pools": ["a3u-sim/h200-b"], "mode": "fabric"})

        def blocked_task():
            with psycopg2.connect(ledger_dsn) as probe, probe.cursor() as cur:
                cur.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                    "AND datname = current_database()"
                )
                waiting = cur.fetchone()[0]
            running = [
                t
                for t in _task_instances(airflow, NIGHTLY, run_id)
                if t["task_id"] == "validate_fabric" and t["state"] == "running" and t["pid"]
            ]
            return running[0] if waiting and running else None

        task = _until("validate_fabric waiting on the ledger", blocked_task, airflow)
        worker = airflow.component_holding(task["pid"])
        assert worker in ("worker-1", "worker-2"), (task, worker)
        airflow.kill_component(worker)  # the task's processes with it
    finally:
        holder.rollback()
        holder.close()
    assert _finished(airflow, NIGHTLY, run_id) == "success"
    fabric = [
        t for t in _task_instances(airflow, NIGHTLY, run_id) if t["task_id"] == "validate_fabric"
    ]
    assert [(t["state"], t["try_number"]) for t in fabric] == [("success", 2)]

    with live_fleet(airflow, live_fleet_dir):
        rows = Ledger().validations_for_run(run_id)
    assert [(r["pool"], r["kind"], r["verdict"]) for r in rows] == [
        ("h200-b", "health", "pass"),  # the GPU health check's row, then the fabric's: once each
        ("h200-b", "fabric", "pass"),
    ]


# --- the event path (issue 33): a watcher on the triggerer, the response on a worker -----------
# Last: its faults quarantine nodes, which the cases above need in service. The watchers start
# here (the response's DAG file parsed again once it is unpaused), so the event path's runs do
# not share the workers with the cases above.

RESPONSE = "node_health_response"


def _signal_assets(airflow: LiveAirflow) -> dict[str, dict]:
    """The ``node-signals-<cluster>`` assets, by name."""
    response = airflow.request(
        "GET", "/api/v2/assets", params={"name_pattern": "node-signals-", "limit": 100}
    )
    response.raise_for_status()
    return {a["name"]: a for a in response.json()["assets"]}


def _asset_events(airflow: LiveAirflow, asset_id: int) -> list[dict]:
    """The asset's events, oldest first. A 5xx is asked again (``_until``, for 1.5 s): once in
    a full suite run the api-server answered 500 while the scheduler was creating the run an
    event triggers (the list joins each event's created runs); one that persists fails."""

    def answered():
        response = airflow.request(
            "GET",
            "/api/v2/assets/events",
            params={"asset_id": asset_id, "order_by": "timestamp", "limit": 100},
        )
        return (response,) if response.status_code < 500 else None  # a 4xx is an answer too

    (response,) = _until("the asset-event list answers without a 5xx", answered, airflow, 1.5)
    response.raise_for_status()
    return sorted(response.json()["asset_events"], key=lambda e: (e["timestamp"], e["id"]))


def _responded_on_a_worker(airflow: LiveAirflow, run_id: str) -> dict:
    """``node_health_response`` run ``run_id`` finished and its ``respond`` ran on this
    deployment's Celery workers (their queue; the scheduler and the triggerer run no task);
    that task instance."""
    assert _finished(airflow, RESPONSE, run_id, timeout=90) == "success"
    respond = [t for t in _task_instances(airflow, RESPONSE, run_id) if t["task_id"] == "respond"]
    assert [(t["state"], t["queue"]) for t in respond] == [("success", airflow.queue)], respond
    assert respond[0]["hostname"], respond
    return respond[0]


def test_a_gpu_fault_is_quarantined_through_the_triggerer_and_a_worker_across_its_restart(
    airflow, live_fleet_dir
):
    """The event path on the deployment: each sim cluster's ``node-signals`` asset has its
    ``NodeWatchTrigger`` watcher in the triggerer; the first list (the baseline) was handed to
    ``node_health_response``, whose ``respond`` ran on a Celery worker. A fatal Xid (79) on a
    node reaches it through the watcher (about a flush, 10 s, after the change): the node is
    tainted ``gpufleet.io/quarantine`` and the ledger holds the signal. A second fault shows the
    watcher kept watching. Then the triggerer is SIGKILLed, a third fault is raised while no
    watcher runs, and a new triggerer starts: its watcher resumes from the version the response
    acknowledged (no relist, nothing replayed) and the third fault arrives too."""
    _celery(airflow)
    from gpufleet.backends.sim.cluster import SimClusterBackend
    from gpufleet.config.catalog import load_catalog
    from gpufleet.domain.signals import Response
    from gpufleet.store import Ledger

    with live_fleet(airflow, live_fleet_dir):
        catalog = load_catalog()
        book = Ledger()
        clusters = sorted(catalog.clusters)  # the live fleet's: every one a sim cluster
        assert all(catalog.cluster(c).provider == "sim" for c in clusters), clusters
        # Airflow makes an asset's watchers when it parses the DAG scheduled on it, and only
        # for a DAG that is not paused; the deployment parsed every file once, while every DAG
        # was paused (as new DAGs are), so the response's file is parsed again now
        airflow.unpause(RESPONSE)
        token = airflow.request("GET", f"/api/v2/dags/{RESPONSE}").json()["file_token"]
        airflow.request("PUT", f"/api/v2/parseDagFile/{token}").raise_for_status()

        def watched() -> dict[str, dict] | None:
            assets = _signal_assets(airflow)
            return assets if all(a["watchers"] for a in assets.values()) else None

        assets = _until("the watchers made", watched, airflow, timeout=60)
        assert sorted(assets) == [f"node-signals-{c}" for c in clusters], sorted(assets)
        for name in clusters:
            watchers = [w["name"] for w in assets[f"node-signals-{name}"]["watchers"]]
            assert watchers == [f"node-watch-{name}"], (name, watchers)

        # the baseline: each cluster's first batch is its list, handled on a worker (a cluster
        # whose region is not onboarded yet has nothing to list: its watcher waits for it)
        existing = [c for c in clusters if SimClusterBackend(catalog.cluster(c)).cluster_exists()]
        assert existing, clusters

        def baselines() -> dict[str, dict] | None:
            found = {}
            for name in existing:
                events = _asset_events(airflow, assets[f"node-signals-{name}"]["id"])
                runs = [r for e in events[:1] for r in e["created_dagruns"]]
                if not (runs and book.watch_cursor(name, "nodes")):
                    return None
                found[name] = {**events[0], "run_id": runs[0]["run_id"]}
            return found

        first = _until("each cluster's baseline handled", baselines, airflow, timeout=120)
        for name, event in first.items():
            payload = event["extra"]["payload"]
            assert event["extra"]["from_trigger"] is True
            assert (payload["cluster"], payload["relist"]) == (name, True), payload
            assert payload["nodes"], payload  # every node as listed
            _responded_on_a_worker(airflow, event["run_id"])

        # no watcher crashed meanwhile (the triggerer restarts one that raised, at once)
        assert "exited with error" not in airflow.component_log("triggerer").read_text()

        cluster = existing[0]
        backend = SimClusterBackend(catalog.cluster(cluster))
        idle = [
            n.name
            for n in backend.nodes()
            if n.pool
            and not (n.quarantined or n.unvalidated or n.workloads)
            and not book.node_signals(cluster, n.name)
        ]
        assert len(idle) >= 3, idle

        def quarantined(node: str) -> dict:
            """``respond``'s task instance once ``node`` carries the quarantine taint and the
            ledger holds its Xid's signal."""

            def handled():
                info = next(n for n in backend.nodes() if n.name == node)
                rows = book.node_signals(cluster, node)
                signals = [s for s in rows if s["response"] == Response.QUARANTINE]
                return signals[0] if info.quarantined and signals else None

            signal = _until(f"{cluster}/{node}'s Xid 79 quarantined", handled, airflow, 90)
            assert "79" in signal["reason"], signal
            return _responded_on_a_worker(airflow, signal["run_id"])

        backend.gpu_fault(idle[0], xid=79)
        quarantined(idle[0])
        backend.gpu_fault(idle[1], xid=79)
        quarantined(idle[1])  # the same watcher, still watching

        asset_id = assets[f"node-signals-{cluster}"]["id"]
        airflow.kill_component("triggerer")
        try:
            # what the killed watcher handed on is handled (each quarantine is a node change
            # too: a batch of its own), so the acknowledged version stays put from here
            def settled():
                events = _asset_events(airflow, asset_id)
                responds = airflow.request(
                    "GET",
                    f"/api/v2/dags/{RESPONSE}/dagRuns/~/taskInstances",
                    params={"task_id": "respond", "limit": 100},
                ).json()["task_instances"]
                done = all(e["created_dagruns"] for e in events) and all(
                    t["state"] in TERMINAL for t in responds
                )
                return events if done else None

            before = {e["id"] for e in _until("the responses settled", settled, airflow, 60)}
            acked = book.watch_cursor(cluster, "nodes")
            backend.gpu_fault(idle[2], xid=79)  # while no watcher runs
        finally:
            airflow.start_component("triggerer")
        quarantined(idle[2])
        # the new watcher went on from the acknowledged version: its first batch follows on
        # from it, and nothing was listed again
        after = [e for e in _asset_events(airflow, asset_id) if e["id"] not in before]
        batches = [e["extra"]["payload"] for e in after]
        assert batches and batches[0]["nodes_from"] == acked, (acked, batches)
        assert not any(b["relist"] for b in batches), batches
        assert idle[2] in {n for b in batches for n in b["nodes"]}, batches
