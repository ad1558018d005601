"""The gpufleet Airflow plugin: the fleet pages in the Airflow UI (docs/ui.md).

The one plugin file at the plugins root (Airflow imports every ``.py`` here as a module; the
``gpufleet`` package itself is in ``.airflowignore``). It only registers what the package
builds: the FastAPI app (``gpufleet.airflow.ui``) served by the api-server under ``/gpufleet``
(built on its first request: every task process imports this file too, and never serves it),
a "GPU fleet" entry in the UI's navigation and a "Fleet report" tab on DAG runs.
"""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from gpufleet.airflow.ui import DeferredApp, create_app

PREFIX = "/gpufleet"


class GpufleetPlugin(AirflowPlugin):
    name = "gpufleet"
    fastapi_apps = [{"app": DeferredApp(create_app), "url_prefix": PREFIX, "name": "gpufleet"}]
    external_views = [
        {
            "name": "GPU fleet",
            "href": f"{PREFIX}/fleet",
            "destination": "nav",
            "url_route": "gpufleet",
        },
        {
            # The UI fills {DAG_ID} and {RUN_ID}; the tab shows on every DAG's runs (the UI
            # cannot limit a tab to one DAG), and a run that validated nothing says so.
            "name": "Fleet report",
            "href": f"{PREFIX}/runs/{{RUN_ID}}/report?dag_id={{DAG_ID}}",
            "destination": "dag_run",
            "url_route": "fleet-report",
        },
    ]
