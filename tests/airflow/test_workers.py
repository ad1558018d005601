"""A Celery worker imports gpufleet once, before it forks its task processes
(``gpufleet.airflow.preload``, named by ``gpufleet.airflow.workers.CELERY_CONFIG``)."""

from __future__ import annotations

import ast
import importlib
import json
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "plugins" / "gpufleet"
# modules a task imports as it runs, left to each task: they bring the cloud SDKs (gRPC,
# boto3), whose clients are not made to cross a fork
LEFT_TO_TASKS = ("gpufleet.backends.gke", "gpufleet.backends.eks")
CLOUD_SDKS = ("grpc", "boto3", "botocore", "google.cloud.container_v1", "google.auth")


def imported_when_run() -> set[str]:
    """The gpufleet modules the operators, triggers, backend factory and services import
    inside functions: what a task imports only once it runs."""
    files = [
        *(p for p in (PACKAGE / "airflow").rglob("*.py") if "ui" not in p.parts),
        PACKAGE / "backends" / "__init__.py",
        *(PACKAGE / "services").rglob("*.py"),
    ]
    found = set()
    for path in files:
        for func in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(func):
                names = []
                if isinstance(node, ast.ImportFrom) and node.module:
                    names = [node.module]
                elif isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                found.update(n for n in names if n.startswith("gpufleet"))
    return {m for m in found if not m.startswith(LEFT_TO_TASKS)}


def test_a_worker_has_imported_what_its_tasks_import_and_no_cloud_sdk():
    wanted = imported_when_run()
    assert "gpufleet.services.validation.fabric" in wanted  # the scan sees lazy imports
    probe = (
        f"import json, sys; sys.path.insert(0, {str(ROOT / 'plugins')!r}); "
        "import gpufleet.airflow.preload as p; "
        "print(json.dumps({'modules': sorted(sys.modules), 'failed': p.FAILED}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120
    )
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["failed"] == []
    missing = sorted(wanted - set(seen["modules"]))
    assert not missing, f"add to gpufleet.airflow.preload.MODULES: {missing}"
    sdks = [m for m in seen["modules"] if m.startswith(CLOUD_SDKS)]
    assert not sdks, f"the preload must not import a cloud SDK before the fork: {sdks}"


def test_the_celery_configuration_is_airflows_plus_the_preload():
    from airflow.providers.celery.executors.default_celery import DEFAULT_CELERY_CONFIG

    from gpufleet.airflow.workers import CELERY_CONFIG, PRELOAD

    assert PRELOAD == "gpufleet.airflow.preload"
    assert tuple(CELERY_CONFIG["imports"])[-1] == PRELOAD
    assert {k: v for k, v in CELERY_CONFIG.items() if k != "imports"} == {
        k: v for k, v in DEFAULT_CELERY_CONFIG.items() if k != "imports"
    }


def test_the_deployments_name_the_configuration():
    compose = yaml.safe_load((ROOT / "docker-compose.yaml").read_text(encoding="utf-8"))
    env = compose["x-airflow-common"]["environment"]
    assert env["AIRFLOW__CELERY__CELERY_CONFIG_OPTIONS"] == "gpufleet.airflow.workers.CELERY_CONFIG"
    deploy = (ROOT / "docs" / "deploy.md").read_text(encoding="utf-8")
    assert "celery_config_options: gpufleet.airflow.workers.CELERY_CONFIG" in deploy
    module, name = env["AIRFLOW__CELERY__CELERY_CONFIG_OPTIONS"].rsplit(".", 1)
    assert getattr(importlib.import_module(module), name)["imports"]


def test_a_module_the_worker_cannot_import_is_logged_and_the_worker_starts(monkeypatch, caplog):
    import gpufleet.airflow.preload as preload

    monkeypatch.setattr(preload, "MODULES", ("gpufleet.no_such_module", "gpufleet.store"))
    with caplog.at_level("WARNING", logger=preload.__name__):
        assert preload.warm() == ["gpufleet.no_such_module"]
    assert "gpufleet.no_such_module not imported" in caplog.text


def test_the_worker_has_compiled_every_manifest_template_before_it_forks():
    """Its tasks render JobSets and Jobs from compiled templates, never compiling them again."""
    probe = (
        f"import json, sys; sys.path.insert(0, {str(ROOT / 'plugins')!r}); "
        "import gpufleet.airflow.preload as p; "
        "from gpufleet.config.paths import include_dir; "
        "from gpufleet.manifests import templates; "
        "env = templates._environment(str(include_dir() / 'manifests')); "
        "print(json.dumps({'all': env.list_templates(), "
        "'compiled': sorted(k[1] for k in env.cache.keys())}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120
    )
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert "nccl-validation.yaml.j2" in seen["all"]
    assert sorted(seen["all"]) == seen["compiled"]
