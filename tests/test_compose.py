"""docker-compose.yaml, Dockerfile and the postgres init script, checked without a Docker engine.

Each check is a function returning the problems it found, so the same checks run against the
real files (must find nothing) and against deliberately broken copies (must find the fault).
"""

from __future__ import annotations

import copy
import fnmatch
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
COMPOSE = ROOT / "docker-compose.yaml"
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"

AIRFLOW_SERVICES = {
    "airflow-apiserver",
    "airflow-scheduler",
    "airflow-dag-processor",
    "airflow-worker",
    "airflow-triggerer",
    "airflow-init",
}
REQUIRED_SERVICES = AIRFLOW_SERVICES | {"postgres", "redis"}
LEDGER_ENV = "AIRFLOW_CONN_GPUFLEET_LEDGER"
CONDITIONS = {"service_started", "service_healthy", "service_completed_successfully"}


def load_compose(path: Path = COMPOSE) -> dict[str, Any]:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return load_compose()


# -- helpers ---------------------------------------------------------------------------------


def env_of(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):  # ["KEY=value", ...]
        env = dict(item.split("=", 1) for item in env)
    return {str(k): str(v) for k, v in env.items()}


def one_shot_services(compose: dict[str, Any]) -> set[str]:
    """Services others wait for to *complete* (airflow-init): they are not long-running."""
    found = set()
    for service in compose["services"].values():
        deps = service.get("depends_on") or {}
        if isinstance(deps, dict):
            for name, spec in deps.items():
                if (spec or {}).get("condition") == "service_completed_successfully":
                    found.add(name)
    return found


def bind_mounts(service: dict[str, Any]) -> list[tuple[str, str]]:
    """(host, container) of every volume entry, short or long syntax."""
    mounts = []
    for entry in service.get("volumes") or []:
        if isinstance(entry, str):
            host, _, rest = entry.partition(":")
            mounts.append((host, rest.split(":")[0]))
        else:
            mounts.append((str(entry.get("source", "")), str(entry.get("target", ""))))
    return mounts


def expand_defaults(value: str) -> str:
    """Resolve ``${VAR:-default}`` to its default, as compose does with VAR unset."""
    return re.sub(r"\$\{[A-Za-z_][A-Za-z0-9_]*:-([^}]*)\}", r"\1", value)


def database_of(url: str) -> tuple[str, str]:
    """(host, database) of an SQLAlchemy/libpq-style URL."""
    parts = urlsplit(url)
    return parts.hostname or "", parts.path.lstrip("/")


# -- the checks ------------------------------------------------------------------------------


def check_services(compose: dict[str, Any]) -> list[str]:
    missing = REQUIRED_SERVICES - set(compose.get("services", {}))
    return [f"missing service {name}" for name in sorted(missing)]


def check_airflow_common(compose: dict[str, Any]) -> list[str]:
    """Every airflow service runs the one image with the common env and mounts (anchor merged)."""
    common = compose["x-airflow-common"]
    common_env = env_of(common)
    problems = []
    if not common.get("image", "").startswith("${AIRFLOW_IMAGE_NAME:-"):
        problems.append("x-airflow-common image is not ${AIRFLOW_IMAGE_NAME:-...}")
    for name, service in compose["services"].items():
        if not name.startswith("airflow-"):
            continue
        if service.get("image") != common.get("image"):
            problems.append(f"{name} image {service.get('image')!r} != {common.get('image')!r}")
        if service.get("build") != common.get("build"):
            problems.append(f"{name} does not build from the common Dockerfile")
        env = env_of(service)
        for key, value in common_env.items():
            if env.get(key) != value:
                problems.append(f"{name} env {key}={env.get(key)!r}, common has {value!r}")
        if bind_mounts(service) != bind_mounts(common):
            problems.append(f"{name} volumes differ from x-airflow-common")
    return problems


def check_mounts(compose: dict[str, Any], root: Path = ROOT) -> list[str]:
    """Host paths exist in the repo; named volumes are declared."""
    declared = set((compose.get("volumes") or {}).keys())
    problems = []
    for name, service in compose["services"].items():
        for host, target in bind_mounts(service):
            host = expand_defaults(host)
            if host.startswith((".", "/", "~")):
                if not host.startswith("./"):
                    problems.append(f"{name} mounts {host}: use a path relative to the repo")
                elif not (root / host).exists():
                    problems.append(f"{name} mounts {host} -> {target}, which is not in the repo")
            elif host not in declared:
                problems.append(f"{name} uses volume {host!r}, not declared under volumes:")
    airflow_targets = {t for _, t in bind_mounts(compose["x-airflow-common"])}
    for target in ("dags", "plugins", "include", "logs", "config"):
        if f"/opt/airflow/{target}" not in airflow_targets:
            problems.append(f"x-airflow-common does not mount /opt/airflow/{target}")
    return problems


def check_healthchecks(compose: dict[str, Any]) -> list[str]:
    problems = []
    one_shot = one_shot_services(compose)
    for name, service in compose["services"].items():
        if name in one_shot:
            if service.get("restart") not in (None, "no"):
                problems.append(f"{name} is awaited to complete but restarts")
            continue
        test = (service.get("healthcheck") or {}).get("test")
        if not test or service.get("healthcheck", {}).get("disable"):
            problems.append(f"long-running service {name} has no healthcheck")
        if service.get("restart") not in ("always", "unless-stopped", "on-failure"):
            problems.append(f"long-running service {name} has no restart policy")
    return problems


def check_depends_on(compose: dict[str, Any]) -> list[str]:
    services = compose["services"]
    problems = []
    graph: dict[str, set[str]] = {}
    for name, service in services.items():
        deps = service.get("depends_on") or {}
        if isinstance(deps, list):
            deps = {d: {"condition": "service_started"} for d in deps}
        graph[name] = set(deps)
        for dep, spec in deps.items():
            condition = (spec or {}).get("condition")
            if dep not in services:
                problems.append(f"{name} depends on undefined service {dep}")
                continue
            if condition not in CONDITIONS:
                problems.append(f"{name} waits for {dep} with unknown condition {condition!r}")
            if condition == "service_healthy" and not services[dep].get("healthcheck"):
                problems.append(f"{name} waits for {dep} healthy, but {dep} has no healthcheck")
    # no cycles
    state: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> None:
        if state.get(node) == 1:
            problems.append("dependency cycle: " + " -> ".join([*path, node]))
            return
        if state.get(node) == 2:
            return
        state[node] = 1
        for dep in sorted(graph.get(node, ())):
            visit(dep, [*path, node])
        state[node] = 2

    for node in sorted(graph):
        visit(node, [])
    return problems


def missing_driver(url: str) -> str | None:
    """Why SQLAlchemy, as pinned here, cannot load the driver ``url`` names (checked in this
    virtualenv, installed from the same requirements as the image), or None: a bare
    ``postgresql://`` means psycopg 3 to SQLAlchemy 2.1, which the requirements do not install
    (the live Celery test found it)."""
    from sqlalchemy.engine import make_url

    try:
        make_url(url).get_dialect().import_dbapi()
    except Exception as exc:  # noqa: BLE001 - any failure to load is the finding
        return f"{url.split('://', 1)[0]}:// cannot be loaded ({type(exc).__name__}: {exc})"
    return None


def check_executor(compose: dict[str, Any]) -> list[str]:
    env = env_of(compose["x-airflow-common"])
    services = compose["services"]
    problems = []
    if env.get("AIRFLOW__CORE__EXECUTOR") != "CeleryExecutor":
        problems.append(f"executor is {env.get('AIRFLOW__CORE__EXECUTOR')!r}, not CeleryExecutor")
    broker_host = urlsplit(env.get("AIRFLOW__CELERY__BROKER_URL", "")).hostname
    if broker_host not in services:
        problems.append(f"celery broker host {broker_host!r} is not a service")
    result_host, _ = database_of(env.get("AIRFLOW__CELERY__RESULT_BACKEND", "").removeprefix("db+"))
    if result_host not in services:
        problems.append(f"celery result backend host {result_host!r} is not a service")
    for key in ("AIRFLOW__CELERY__RESULT_BACKEND", "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"):
        missing = missing_driver(env.get(key, "").removeprefix("db+"))
        if missing:
            problems.append(f"{key}: {missing}")
    if "celery worker" not in str(services.get("airflow-worker", {}).get("command")):
        problems.append("airflow-worker does not run `celery worker`")
    if not env.get("AIRFLOW__API_AUTH__JWT_SECRET"):
        problems.append("no shared AIRFLOW__API_AUTH__JWT_SECRET: task tokens would not verify")
    exec_url = urlsplit(env.get("AIRFLOW__CORE__EXECUTION_API_SERVER_URL", ""))
    if exec_url.hostname != "airflow-apiserver" or exec_url.path != "/execution/":
        problems.append("AIRFLOW__CORE__EXECUTION_API_SERVER_URL must point at airflow-apiserver")
    return problems


def check_ledger(compose: dict[str, Any], root: Path = ROOT) -> list[str]:
    """The ledger is its own PostgreSQL database, created by the init script."""
    env = env_of(compose["x-airflow-common"])
    services = compose["services"]
    problems = []
    ledger_url = env.get(LEDGER_ENV)
    if not ledger_url:
        return [f"{LEDGER_ENV} is not set in x-airflow-common"]
    if urlsplit(ledger_url).scheme not in ("postgresql", "postgres"):
        problems.append(f"{LEDGER_ENV} is not a postgresql:// URL")
    ledger_host, ledger_db = database_of(ledger_url)
    meta_host, meta_db = database_of(env.get("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", ""))
    if ledger_host not in services:
        problems.append(f"ledger host {ledger_host!r} is not a service")
    if not ledger_db or ledger_db == meta_db:
        problems.append(
            f"ledger database {ledger_db!r} must differ from the metadata DB {meta_db!r}"
        )
    postgres_env = env_of(services.get("postgres", {}))
    if meta_db != postgres_env.get("POSTGRES_DB"):
        problems.append(f"metadata DB {meta_db!r} is not the postgres service's POSTGRES_DB")
    init_dirs = [
        root / expand_defaults(host)
        for host, target in bind_mounts(services.get("postgres", {}))
        if target == "/docker-entrypoint-initdb.d"
    ]
    if not init_dirs:
        return [*problems, "postgres does not mount an init dir at /docker-entrypoint-initdb.d"]
    created = set()
    for init_dir in init_dirs:
        for script in sorted(init_dir.glob("*")):
            if script.suffix not in (".sql", ".sh"):
                continue
            text = re.sub(r"--[^\n]*", "", script.read_text(encoding="utf-8"))
            created |= set(re.findall(r'CREATE\s+DATABASE\s+"?([A-Za-z0-9_]+)"?', text, re.I))
    if ledger_db not in created:
        problems.append(f"no init script creates database {ledger_db!r} (found {sorted(created)})")
    return problems


def dockerfile_instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with line continuations joined and comments dropped."""
    joined = re.sub(r"\\\n", " ", text)
    result = []
    for line in joined.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            result.append((word.upper(), rest.strip()))
    return result


def check_dockerfile(compose: dict[str, Any], root: Path = ROOT) -> list[str]:
    instructions = dockerfile_instructions((root / "Dockerfile").read_text(encoding="utf-8"))
    problems = []
    froms = [args for word, args in instructions if word == "FROM"]
    pinned = re.search(
        r"^apache-airflow==(\S+)", (root / "requirements.txt").read_text(), re.MULTILINE
    )
    want = f"apache/airflow:{pinned.group(1) if pinned else '?'}-python3.11"
    if froms != [want]:
        problems.append(f"Dockerfile FROM {froms}, expected [{want!r}] (requirements.txt pin)")
    runs = " && ".join(args for word, args in instructions if word == "RUN")
    if not re.search(r"pip install\b[^&;]*-c constraints\.txt[^&;]*-r requirements\.txt", runs):
        problems.append("Dockerfile does not pip install -c constraints.txt -r requirements.txt")
    if not re.search(r"pip install\b[^&;]*--no-deps[^&;]*\s\.(\s|$)", runs):
        problems.append("Dockerfile does not pip install --no-deps . (the gpufleet package)")
    ignored = [
        line.strip()
        for line in (root / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    for word, args in instructions:
        if word not in ("COPY", "ADD"):
            continue
        sources = [a for a in args.split() if not a.startswith("--")][:-1]
        for source in sources:
            path = source.rstrip("/")
            if not (root / path).exists():
                problems.append(f"Dockerfile copies {source}, which is not in the repo")
            if any(fnmatch.fnmatch(path, pattern.rstrip("/")) for pattern in ignored):
                problems.append(f"Dockerfile copies {source}, but .dockerignore excludes it")
    return problems


ALL_CHECKS = (
    check_services,
    check_airflow_common,
    check_mounts,
    check_healthchecks,
    check_depends_on,
    check_executor,
    check_ledger,
    check_dockerfile,
)


# -- the real files --------------------------------------------------------------------------


@pytest.mark.parametrize("check", ALL_CHECKS, ids=lambda c: c.__name__)
def test_compose_files(check, compose: dict[str, Any]) -> None:
    assert check(compose) == []


def test_ledger_env_names_the_ledger_connection() -> None:
    from gpufleet.store.ledger import LEDGER_CONN_ID

    assert f"AIRFLOW_CONN_{LEDGER_CONN_ID.upper()}" == LEDGER_ENV


def test_cli_defaults_reach_the_compose_api_server(compose: dict[str, Any]) -> None:
    from gpufleet.cli.args import AIRFLOW_URL as DEFAULT_URL
    from gpufleet.cli.args import AIRFLOW_USER as DEFAULT_USER

    ports = compose["services"]["airflow-apiserver"]["ports"]
    assert f"{urlsplit(DEFAULT_URL).port}:8080" in ports
    users = expand_defaults(
        env_of(compose["x-airflow-common"])["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS"]
    )
    assert f"{DEFAULT_USER}:admin" in users.split(",")


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
def test_init_script_is_valid_bash(compose: dict[str, Any], tmp_path: Path) -> None:
    command = compose["services"]["airflow-init"]["command"]
    assert command[0] == "-c"
    script = command[1].replace("$$", "$")  # compose's escape for a literal $
    (tmp_path / "init.sh").write_text(script)
    result = subprocess.run(["bash", "-n", str(tmp_path / "init.sh")], capture_output=True)
    assert result.returncode == 0, result.stderr.decode()
    assert "set -euo pipefail" in script


# -- the checks find faults ------------------------------------------------------------------


def broken(compose: dict[str, Any], change) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    copied = copy.deepcopy(compose)
    change(copied)
    return copied


@pytest.mark.parametrize(
    ("check", "change", "expected"),
    [
        (
            check_services,
            lambda c: c["services"].pop("airflow-triggerer"),
            "missing service airflow-triggerer",
        ),
        (
            check_airflow_common,
            lambda c: c["services"]["airflow-worker"].update(image="apache/airflow:3.3.2"),
            "airflow-worker image",
        ),
        (
            check_airflow_common,
            # a new dict: the parsed YAML shares one env object between anchor and aliases
            lambda c: c["services"]["airflow-scheduler"].update(
                environment={
                    k: v for k, v in c["x-airflow-common"]["environment"].items() if k != LEDGER_ENV
                }
            ),
            f"airflow-scheduler env {LEDGER_ENV}=None",
        ),
        (
            check_mounts,
            lambda c: c["x-airflow-common"]["volumes"].append("./no-such-dir:/opt/x"),
            "mounts ./no-such-dir",
        ),
        (
            check_mounts,
            lambda c: c["services"]["postgres"]["volumes"].append("undeclared:/data"),
            "volume 'undeclared', not declared",
        ),
        (
            check_healthchecks,
            lambda c: c["services"]["airflow-triggerer"].pop("healthcheck"),
            "airflow-triggerer has no healthcheck",
        ),
        (
            check_depends_on,
            lambda c: c["services"]["airflow-scheduler"]["depends_on"].update(
                airflow_init={"condition": "service_completed_successfully"}
            ),
            "undefined service airflow_init",
        ),
        (
            check_depends_on,
            lambda c: c["services"]["redis"].update(
                depends_on={"airflow-worker": {"condition": "service_started"}}
            ),
            "dependency cycle",
        ),
        (
            check_executor,
            lambda c: c["x-airflow-common"]["environment"].update(
                AIRFLOW__CORE__EXECUTOR="LocalExecutor"
            ),
            "not CeleryExecutor",
        ),
        (
            check_executor,
            lambda c: c["x-airflow-common"]["environment"].update(
                AIRFLOW__CELERY__RESULT_BACKEND="db+postgresql://airflow:airflow@postgres/airflow"
            ),
            "AIRFLOW__CELERY__RESULT_BACKEND: postgresql:// cannot be loaded",
        ),
        (
            check_ledger,
            lambda c: c["x-airflow-common"]["environment"].update(
                {LEDGER_ENV: "postgresql://airflow:airflow@postgres:5432/airflow"}
            ),
            "must differ from the metadata DB",
        ),
        (
            check_ledger,
            lambda c: c["x-airflow-common"]["environment"].update(
                {LEDGER_ENV: "postgresql://airflow:airflow@postgres:5432/other_ledger"}
            ),
            "no init script creates database 'other_ledger'",
        ),
    ],
)
def test_checks_find_faults(compose: dict[str, Any], check, change, expected: str) -> None:
    problems = check(broken(compose, change))
    assert any(expected in p for p in problems), problems


def test_dockerfile_check_finds_faults(tmp_path: Path, compose: dict[str, Any]) -> None:
    for name in ("Dockerfile", ".dockerignore", "requirements.txt"):
        shutil.copy(ROOT / name, tmp_path / name)
    for name in ("constraints.txt", "pyproject.toml", "README.md"):
        (tmp_path / name).write_text("")
    for name in ("plugins", "dags", "include"):
        (tmp_path / name).mkdir()
    assert check_dockerfile(compose, tmp_path) == []

    dockerfile = tmp_path / "Dockerfile"
    good = dockerfile.read_text()
    dockerfile.write_text(good.replace("-c constraints.txt ", ""))
    assert any("-c constraints.txt" in p for p in check_dockerfile(compose, tmp_path))
    dockerfile.write_text(good.replace("3.3.2-python3.11", "3.2.0-python3.11"))
    assert any("Dockerfile FROM" in p for p in check_dockerfile(compose, tmp_path))
    dockerfile.write_text(good)
    (tmp_path / ".dockerignore").write_text("plugins\n")
    assert any(".dockerignore excludes it" in p for p in check_dockerfile(compose, tmp_path))
    (tmp_path / ".dockerignore").write_text("")
    (tmp_path / "constraints.txt").unlink()
    assert any("constraints.txt, which is not" in p for p in check_dockerfile(compose, tmp_path))
