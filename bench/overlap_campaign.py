"""The overlap and crash campaign: the long DAGs, run as production runs them, many at once.

For each DAG (``region_onboarding``, ``reservation_transition``, ``nightly_fabric_validation``,
``gated_training_launch``, and ``sim_fault_drill``, the nightly's validation with a fault
injected for its run) and each ledger (SQLite, PostgreSQL), over seeds:

- **overlap**: two runs of the same conf started together, each a real ``dag.test()`` in its
  own process over one Airflow metadata database (one deployment), one gpufleet ledger and one
  simulated fleet;
- **kill**: a run SIGKILLed (its whole process group) after a random delay, so at a random
  step; the harness then does what Airflow's scheduler does with a run whose task process
  died (the task and the run are marked failed), and the same conf is run again.

After each case the invariants are checked from the ledger and the simulated fleet, in a
process of the case's own environment (``--check``):

- at most one run acted on a cluster's transition or a region's onboarding (the ledger records
  which run did each step: one run per step);
- no destructive step completed twice, nothing was created twice (one transition per pair of
  pools, one new pool with the catalog's node count, one JobSet per job name);
- no run-scoped simulated fault outlived its run;
- the ledger agrees with the fleet (a retired pool has no nodes, a ready region's nodes carry no
  unvalidated taint, a validated pool's queue admits).

    python -m bench.overlap_campaign [--seeds 3] [--dags all] [--ledgers sqlite,postgresql]
                                     [--scenarios overlap,kill] [--out results.json]

Exits 1 when any invariant is broken in any case. ``tests/test_overlap_campaign.py`` runs a
bounded slice of it in ``make test``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
PG = "postgresql+psycopg2://postgres@127.0.0.1:5432/"

# The conf of each DAG's case, and the delay window (seconds after the process starts) in which
# the kill lands: from about when the first task runs to about when a clean run ends.
TRANSITION = {"cluster": "a3u-sim", "old_pool": "h200-b", "new_pool": "h200-c"}
CONF = {
    "reservation_transition": {**TRANSITION, "soak_minutes": 0.01},
    "region_onboarding": {"region": "sim-europe-west4"},
    "nightly_fabric_validation": {"pools": ["a3u-sim/h200-a"]},
    "sim_fault_drill": {
        "pools": ["a3u-sim/h200-a"],
        "sim_faults": ["a3u-sim/h200-a=bad-node:a3u-sim-h200-a-1"],
    },
    "gated_training_launch": {
        "cluster": "a3u-sim",
        "pools": ["h200-a"],
        "nodes": 2,
        "gpus_per_node": 8,
        "job_name": "campaign-job",
        "namespace": "ml-team",
        "image": "example/train:1",
        "command": ["torchrun", "train.py"],
    },
}
KILL_WINDOW = {  # seconds after the run was created
    "reservation_transition": (0.5, 25.0),
    "region_onboarding": (0.5, 25.0),
    "nightly_fabric_validation": (0.5, 20.0),
    "sim_fault_drill": (0.5, 20.0),
    "gated_training_launch": (0.5, 15.0),
}
DAGS = tuple(CONF)
RESULT = "OVERLAP-CAMPAIGN-RUN"  # the line a run's process ends with: its run id and state


@dataclass
class Case:
    dag: str
    scenario: str  # overlap | kill
    ledger: str  # sqlite | postgresql
    seed: int
    outcomes: list[str] = field(default_factory=list)
    killed_in: list[str] = field(default_factory=list)  # the tasks running when killed
    violations: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def name(self) -> str:
        return f"{self.dag}/{self.scenario}/{self.ledger}/seed{self.seed}"


# --- a case's environment -----------------------------------------------------------------------


def _template_home() -> Path:
    """A migrated Airflow metadata DB (SQLite), made once and copied into every case."""
    home = Path(tempfile.gettempdir()) / f"gpufleet-overlap-template-{os.getuid()}"
    db = home / "airflow.db"
    if not (home / ".migrated").exists():
        shutil.rmtree(home, ignore_errors=True)
        home.mkdir(parents=True)
        env = _airflow_env(home)
        subprocess.run(
            [str(Path(PY).parent / "airflow"), "db", "migrate"],
            env=env,
            check=True,
            capture_output=True,
        )
        # the DAGs and their assets in the metadata DB once: two runs started together would
        # otherwise both insert them (dag.test() syncs its DAG) and one would fail on that
        subprocess.run(
            [str(Path(PY).parent / "airflow"), "dags", "reserialize"],
            env=env,
            check=True,
            capture_output=True,
        )
        (home / ".migrated").touch()
    assert db.exists()
    return home


def _airflow_env(home: Path) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("AIRFLOW", "GPUFLEET_")) or k == "GPUFLEET_SIM_SPEED"
    }
    env.update(
        {
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
            "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
            "AIRFLOW__CORE__PLUGINS_FOLDER": str(ROOT / "plugins"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
            "GPUFLEET_SIM_SPEED": os.environ.get("GPUFLEET_SIM_SPEED", "0.05"),
            "PYTHONPATH": os.pathsep.join([str(ROOT / "plugins"), str(ROOT)]),
        }
    )
    return env


def _postgres_db() -> str:
    import psycopg2

    name = f"gf_overlap_{uuid.uuid4().hex[:10]}"
    admin = psycopg2.connect(host="127.0.0.1", user="postgres", dbname="postgres")
    admin.autocommit = True
    with admin.cursor() as cur:
        cur.execute(f'CREATE DATABASE "{name}"')
    admin.close()
    return name


def _drop_postgres_db(name: str) -> None:
    import psycopg2

    admin = psycopg2.connect(host="127.0.0.1", user="postgres", dbname="postgres")
    admin.autocommit = True
    with admin.cursor() as cur:
        cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    admin.close()


class CaseEnv:
    """A fresh Airflow home (copied from the template), sim fleet and ledger for one case."""

    def __init__(self, case: Case, workdir: Path):
        self.dir = workdir / case.name.replace("/", "-")
        shutil.rmtree(self.dir, ignore_errors=True)
        home = self.dir / "airflow"
        shutil.copytree(_template_home(), home)
        self.env = _airflow_env(home)
        self.env["GPUFLEET_STATE_DIR"] = str(self.dir / "gpufleet")
        self.pg: str | None = None
        if case.ledger == "postgresql":
            self.pg = _postgres_db()
            self.env["GPUFLEET_LEDGER_URL"] = PG + self.pg
        self.logs = self.dir / "logs"
        self.logs.mkdir(parents=True)

    def close(self, keep: bool) -> None:
        if self.pg:
            _drop_postgres_db(self.pg)
        if not keep:
            shutil.rmtree(self.dir, ignore_errors=True)

    def start(self, mode: str, *args: str, log: str) -> subprocess.Popen:
        out = open(self.logs / log, "w")  # noqa: SIM115 (closed with the process)
        return subprocess.Popen(
            [PY, "-m", "bench.overlap_campaign", mode, *args],
            env=self.env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: the kill takes all of it
        )

    def wait_for_run(self, proc: subprocess.Popen, log: str, timeout: float = 120) -> None:
        """Until the run exists (its process has imported Airflow and parsed the DAG): the
        kill's random delay counts from there, so it lands in a task, not in start-up."""
        deadline = time.monotonic() + timeout
        while "Created dag run" not in (self.logs / log).read_text(errors="replace"):
            if proc.poll() is not None or time.monotonic() > deadline:
                return
            time.sleep(0.1)

    def call(self, mode: str, *args: str, timeout: float = 300) -> dict:
        proc = subprocess.run(
            [PY, "-m", "bench.overlap_campaign", mode, *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
        if proc.returncode != 0 or not lines:
            raise RuntimeError(f"{mode} failed ({proc.returncode}): {proc.stderr[-3000:]}")
        return json.loads(lines[-1])


# --- inside a case's environment (subprocess modes) -------------------------------------------


def _run_mode(dag_id: str) -> None:
    """One DAG run through ``dag.test()``; prints its final state as a JSON line."""
    from airflow.dag_processing.dagbag import DagBag

    from tests.support.fleet import short_idle_waits
    from tests.support.hitl import Answer

    bag = DagBag(dag_folder=str(ROOT / "dags" / f"{dag_id}.py"))
    # the transition's retire waits for a person (approve_retire): approved as the REST API would
    with short_idle_waits(1.0, on_idle=Answer("Approve", "overlap-campaign")):
        dr = bag.dags[dag_id].test(run_conf=CONF[dag_id])
    state = getattr(dr.state, "value", dr.state)
    print(RESULT, json.dumps({"run_id": dr.run_id, "state": str(state)}), flush=True)


def _prep_mode(dag_id: str) -> None:
    """What a case needs before its runs: a launch needs a validated pool."""
    if dag_id == "gated_training_launch":
        from tests.support.fleet import validate

        validate("a3u-sim", "h200-a", run_id="campaign-seed")
    print(json.dumps({"ok": True}), flush=True)


def _reap_mode(dag_id: str) -> None:
    """What Airflow's scheduler does with a run whose task process was killed: its unfinished
    task instances are failed, then the run. Prints where the kill landed: the tasks that were
    in flight, else the last task that had finished."""
    from airflow.models import DagRun, TaskInstance
    from airflow.utils.session import create_session
    from airflow.utils.state import DagRunState, TaskInstanceState

    finished = {TaskInstanceState.SUCCESS, TaskInstanceState.FAILED, TaskInstanceState.SKIPPED}
    where, last = [], None
    with create_session() as session:
        runs = session.query(DagRun).filter(
            DagRun.dag_id == dag_id, DagRun.state.in_([DagRunState.RUNNING, DagRunState.QUEUED])
        )
        for dr in runs:
            for ti in session.query(TaskInstance).filter(
                TaskInstance.dag_id == dag_id, TaskInstance.run_id == dr.run_id
            ):
                if ti.state in finished or ti.state == TaskInstanceState.UPSTREAM_FAILED:
                    if ti.end_date and (last is None or ti.end_date > last[0]):
                        last = (ti.end_date, ti.task_id)
                    continue
                if ti.state is not None:
                    where.append(f"{ti.task_id} ({getattr(ti.state, 'value', ti.state)})")
                ti.state = (
                    TaskInstanceState.FAILED if ti.state else TaskInstanceState.UPSTREAM_FAILED
                )
            dr.state = DagRunState.FAILED
    if not where:
        where = [f"between tasks, after {last[1]}" if last else "before the first task"]
    print(json.dumps({"running": sorted(set(where))}), flush=True)


def _check_mode(dag_id: str) -> None:
    """The invariants, from the ledger and the simulated fleet: prints the violations."""
    from bench.overlap_invariants import violations

    print(json.dumps({"violations": violations(dag_id, CONF[dag_id])}), flush=True)


# --- the campaign -------------------------------------------------------------------------------


def run_case(case: Case, workdir: Path, keep: bool = False) -> Case:
    rng = random.Random(f"{case.name}")
    started = time.monotonic()
    env = CaseEnv(case, workdir)
    try:
        env.call("--prep", case.dag)
        if case.scenario == "overlap":
            procs = [env.start("--run", case.dag, log=f"run{i}.log") for i in (1, 2)]
            for p in procs:
                p.wait(timeout=600)
        else:
            lo, hi = KILL_WINDOW[case.dag]
            proc = env.start("--run", case.dag, log="killed.log")
            env.wait_for_run(proc, "killed.log")
            try:
                proc.wait(timeout=rng.uniform(lo, hi))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            case.killed_in = env.call("--reap", case.dag)["running"]
            if proc.returncode == 0:  # the delay outlasted the run: nothing was killed
                case.killed_in = ["nothing: the run had ended"]
            env.start("--run", case.dag, log="rerun.log").wait(timeout=600)
        for log in sorted(env.logs.glob("*.log")):
            found = re.findall(RESULT + r" (\{.*?\})", log.read_text(errors="replace"))
            state = json.loads(found[-1])["state"] if found else "killed"
            case.outcomes.append(f"{log.stem}: {state}")
        case.violations = env.call("--check", case.dag)["violations"]
    except Exception as exc:  # a harness failure is a violation too: it is reported, not hidden
        case.violations.append(f"harness: {type(exc).__name__}: {exc}")
    finally:
        env.close(keep=keep or bool(case.violations))
        case.seconds = round(time.monotonic() - started, 1)
    return case


def cases(dags, ledgers, scenarios, seeds) -> list[Case]:
    return [
        Case(dag, scenario, ledger, seed)
        for seed in seeds
        for dag in dags
        for ledger in ledgers
        for scenario in scenarios
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--dags", default="all")
    parser.add_argument("--ledgers", default="sqlite,postgresql")
    parser.add_argument("--scenarios", default="overlap,kill")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--keep", action="store_true", help="keep every case's directory")
    args = parser.parse_args(argv)
    dags = DAGS if args.dags == "all" else tuple(args.dags.split(","))
    todo = cases(
        dags,
        args.ledgers.split(","),
        args.scenarios.split(","),
        range(args.first_seed, args.first_seed + args.seeds),
    )
    workdir = Path(tempfile.mkdtemp(prefix="gpufleet-overlap-"))
    results = []
    for case in todo:
        run_case(case, workdir, keep=args.keep)
        results.append(case)
        status = "ok" if not case.violations else "BROKEN: " + "; ".join(case.violations)
        killed = (
            f" killed in {','.join(case.killed_in) or 'nothing: it had ended'}"
            if case.killed_in or case.scenario == "kill"
            else ""
        )
        print(
            f"{case.name:62s} {case.seconds:6.1f}s {' '.join(case.outcomes)}{killed}  {status}",
            flush=True,
        )
    broken = [c for c in results if c.violations]
    print(f"\n{len(results)} cases, {len(broken)} with a broken invariant (work dir {workdir})")
    if args.out:
        args.out.write_text(json.dumps([asdict(c) for c in results], indent=1))
    if not broken and not args.keep:
        shutil.rmtree(workdir, ignore_errors=True)
    return 1 if broken else 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] in ("--run", "--prep", "--reap", "--check"):
        {"--run": _run_mode, "--prep": _prep_mode, "--reap": _reap_mode, "--check": _check_mode}[
            sys.argv[1]
        ](sys.argv[2])
        sys.exit(0)
    sys.exit(main())
