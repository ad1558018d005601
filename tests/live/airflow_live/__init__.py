"""A real Airflow 3 for end-to-end tests: api-server, scheduler, dag-processor and triggerer.

``start_airflow(dags_folder)`` builds a throwaway ``AIRFLOW_HOME``, points it at a throwaway
PostgreSQL database when 127.0.0.1:5432 answers (dropped at teardown) or at a SQLite file
otherwise (under ``CI=true`` a PostgreSQL that refuses fails the test instead:
tests/support/postgres.py), migrates it (on PostgreSQL: copies a migrated template the first
session left on the server, ``TEMPLATE_PREFIX``), starts the four components from the
project's virtualenv as their own process groups and waits until ``/api/v2/monitor/health``
reports every component healthy and the DAG processor has parsed every DAG file.
``LiveAirflow.startup`` says where the start-up's seconds went.

The executor is the one the project ships (docker-compose.yaml): **CeleryExecutor** when
PostgreSQL and Redis (127.0.0.1:6379) both answer, with two ``airflow celery worker`` processes
(``worker-1``, ``worker-2``) on a queue of their own (several sessions may share one Redis), the
Celery results and the gpufleet ledger in PostgreSQL databases of their own; else
LocalExecutor (a laptop without them; under ``CI=true`` a Redis that does not answer fails the
test instead). ``LiveAirflow.executor`` says which. ``LiveAirflow.stop()`` kills the process
groups, drops the databases and removes the home unless asked to keep it (logs are under
``home/logs``).

Knobs (environment): ``GPUFLEET_LIVE_DB=sqlite`` forces SQLite; ``GPUFLEET_LIVE_PG`` is a libpq
DSN for the server holding the throwaway database (default
``host=127.0.0.1 port=5432 user=postgres dbname=postgres``); ``GPUFLEET_LIVE_VENV`` the
virtualenv whose ``bin/airflow`` runs (default ``<repo>/.venv``); ``GPUFLEET_LIVE_KEEP=1`` keeps
the home and database after teardown; ``GPUFLEET_LIVE_REDIS`` the broker (default
``redis://127.0.0.1:6379/0``; ``none`` forces LocalExecutor); ``GPUFLEET_LIVE_PLUGINS`` another
plugins folder (default ``<repo>/plugins``); ``GPUFLEET_LIVE_TEMPLATE=0`` migrates every
session's database instead of copying the template.

One module per job: ``preflight`` (the plugins folder), ``services`` (which PostgreSQL and Redis
answer), ``databases`` (the throwaway and template databases), ``environment`` (what every
component runs with), ``deployment`` (``LiveAirflow``: the processes, the harness's REST calls,
the teardown) and ``startup`` (``start_airflow``: up and ready); ``common`` holds what they
share. Import from the package: its names are the harness's API.
"""

from tests.live.airflow_live.common import (
    COMPONENTS,
    PLUGINS_DIR,
    REPO_ROOT,
    USERNAME,
    VIEWER,
    WORKERS,
    LiveAirflowError,
    free_port,
    tail,
    venv_bin,
)
from tests.live.airflow_live.databases import TEMPLATE_PREFIX, template_name
from tests.live.airflow_live.deployment import LiveAirflow, descendants
from tests.live.airflow_live.environment import airflow_env
from tests.live.airflow_live.preflight import (
    check_plugins_folder,
    package_modules_loaded_as_plugins,
)
from tests.live.airflow_live.services import (
    postgres_available,
    redis_available,
    venv_has_postgres_drivers,
)
from tests.live.airflow_live.startup import dag_files, start_airflow

__all__ = [
    "COMPONENTS",
    "PLUGINS_DIR",
    "REPO_ROOT",
    "TEMPLATE_PREFIX",
    "USERNAME",
    "VIEWER",
    "WORKERS",
    "LiveAirflow",
    "LiveAirflowError",
    "airflow_env",
    "check_plugins_folder",
    "dag_files",
    "descendants",
    "free_port",
    "package_modules_loaded_as_plugins",
    "postgres_available",
    "redis_available",
    "start_airflow",
    "tail",
    "template_name",
    "venv_bin",
    "venv_has_postgres_drivers",
]
