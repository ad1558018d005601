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

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class DeferredApp:
    """An ASGI app built by ``factory`` on its first request, then served as built.

    Airflow imports every plugin file in every process that loads plugins: each task process
    does (its listeners), and the api-server. Only the api-server serves the app, so the plugin
    registers this stand-in and a task process never imports FastAPI or the pages (about a
    sixth of a sim validation task's CPU). ``app`` builds it on demand."""

    def __init__(self, factory: Callable[[], Any]):
        self._factory = factory
        self._app: Any = None

    @property
    def app(self) -> Any:
        if self._app is None:  # one event loop: no two requests build it at once
            self._app = self._factory()
        return self._app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self.app(scope, receive, send)


def create_app() -> Any:
    """The gpufleet FastAPI app (``app.create_app``), imported only when asked for."""
    from gpufleet.airflow.ui.app import create_app as build

    return build()
