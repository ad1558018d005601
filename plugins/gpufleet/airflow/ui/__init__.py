"""The fleet in the Airflow UI: a FastAPI app the api-server mounts at ``/gpufleet``.

``app.create_app`` builds it (pages: fleet readiness, pool history, a run's nightly report;
their JSON twins; ``/metrics`` from ``metrics.py``, its text written by ``exposition.py``;
``heap.py`` pauses the cycle collector while a fleet-wide read holds its rows); ``pages``
renders the HTML from the read models of ``gpufleet.services.views.fleet`` and ``.pool``
through the one set of templates (``gpufleet.services.views.render``, shared with the nightly
report); ``static/`` holds the vendored chart library (uPlot, MIT) and the pages' own script.
Part of the Airflow layer: may import Airflow (its auth dependencies) and every layer below;
the plugin file ``plugins/gpufleet_plugin.py`` registers it. See docs/ui.md.
"""
