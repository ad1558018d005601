"""Imported once by each Celery worker of a gpufleet deployment, before it forks tasks.

Airflow forks every task process from the worker (its supervisor, from Celery's pool process).
What the worker has imported, each task has for free; what it has not, each task imports
again. A sim validation task spent about half its CPU importing gpufleet's services, store,
parsing and backends, and parsing the fleet catalog (docs/PERFORMANCE.md). Celery imports this
module in the worker's main process when it starts (``imports`` in ``workers.CELERY_CONFIG``),
before the pool processes fork.

Only gpufleet's own modules, the Kubernetes backend and the sim are imported here (and the
manifest templates compiled), and no client is built: the cloud SDK backends
(``gpufleet.backends.gke``, ``.eks``) stay with each task, since gRPC's channels and boto3's
sessions are not made to cross a fork. A catalog that cannot be read now is read by each task,
which reports it."""

from __future__ import annotations

import importlib
import logging
from contextlib import suppress

_log = logging.getLogger(__name__)

# The modules gpufleet's operators, triggers and backend factory import when a task runs
# (inside functions: a DAG file's parse stays light). tests/test_workers.py checks the list
# against the code.
MODULES = (
    "gpufleet.airflow.event_triggers",
    "gpufleet.airflow.hooks",
    "gpufleet.airflow.notifiers",
    "gpufleet.airflow.operators.cluster_run",
    "gpufleet.airflow.operators.faults",
    "gpufleet.airflow.operators.launch",
    "gpufleet.airflow.operators.nightly",
    "gpufleet.airflow.operators.onboarding",
    "gpufleet.airflow.operators.remediation",
    "gpufleet.airflow.operators.step_report",
    "gpufleet.airflow.operators.transition",
    "gpufleet.airflow.operators.validation",
    "gpufleet.backends.instance_status",
    "gpufleet.backends.kube.cluster",
    "gpufleet.backends.sim.cloud",
    "gpufleet.backends.sim.cluster",
    "gpufleet.config.catalog",
    "gpufleet.domain.verdicts",
    "gpufleet.manifests.addons",
    "gpufleet.manifests.nccl_validation",
    "gpufleet.manifests.storage_validation",
    "gpufleet.manifests.training",
    "gpufleet.services.infrastructure.addons",
    "gpufleet.services.infrastructure.onboarding",
    "gpufleet.services.infrastructure.transition",
    "gpufleet.services.launch.request",
    "gpufleet.services.launch.submit",
    "gpufleet.services.nodes.admission",
    "gpufleet.services.nodes.approvals",
    "gpufleet.services.nodes.drain",
    "gpufleet.services.nodes.events",
    "gpufleet.services.nodes.remediation",
    "gpufleet.services.nodes.watch_batch",
    "gpufleet.services.validation.fabric",
    "gpufleet.services.validation.fanout",
    "gpufleet.services.validation.run_faults",
    "gpufleet.services.validation.scope",
    "gpufleet.services.validation.full_test",
    "gpufleet.services.validation.storage",
    "gpufleet.services.validation.unvalidated",
    "gpufleet.services.views.approvals",
    "gpufleet.services.views.cost",
    "gpufleet.services.views.fleet",
    "gpufleet.services.views.nightly_report",
    "gpufleet.services.views.onboarding_report",
    "gpufleet.services.views.reliability",
    "gpufleet.services.views.render",
    "gpufleet.store",
)


def warm() -> list[str]:
    """Import ``MODULES`` and read the fleet catalog (kept per process while its files do not
    change); returns the modules that could not be imported, logged, for the tasks to report."""
    failed = []
    for name in MODULES:
        try:
            importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - the worker starts anyway; a task reports it
            _log.warning("gpufleet preload: %s not imported: %s", name, exc)
            failed.append(name)
    with suppress(Exception):  # no catalog yet, or a broken one: each task reads and reports it
        from gpufleet.config.catalog import load_catalog

        load_catalog()
    with suppress(Exception):  # a template that does not compile fails the task that renders it
        compile_templates()
    return failed


def compile_templates() -> list[str]:
    """Compile every manifest template (``include/manifests``) into the Jinja environment the
    manifests render with, so the forked tasks find them compiled: a validation task spent
    about 7 % of its CPU compiling the JobSet and Job templates it renders (py-spy over a
    100-pool nightly, docs/PERFORMANCE.md). Returns the templates' names."""
    from gpufleet.config.paths import include_dir
    from gpufleet.manifests import templates

    env = templates._environment(str(include_dir() / "manifests"))
    names = env.list_templates()
    for name in names:
        env.get_template(name)
    return names


FAILED = warm()  # what this worker could not preload (logged): its tasks import and report it
