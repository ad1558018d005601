"""Airflow's Celery configuration for a gpufleet deployment: Airflow's own, plus ``imports``,
so that each worker imports ``gpufleet.airflow.preload`` once, before it forks task processes.

Set ``AIRFLOW__CELERY__CELERY_CONFIG_OPTIONS=gpufleet.airflow.workers.CELERY_CONFIG``
(docker-compose.yaml, the Helm values in docs/deploy.md). The scheduler reads this too, to
send tasks: it imports no more than Airflow's default configuration does."""

from __future__ import annotations

from airflow.providers.celery.executors.default_celery import DEFAULT_CELERY_CONFIG

PRELOAD = "gpufleet.airflow.preload"

CELERY_CONFIG = {
    **DEFAULT_CELERY_CONFIG,
    "imports": (*DEFAULT_CELERY_CONFIG.get("imports", ()), PRELOAD),
}
