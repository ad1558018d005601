"""The one set of HTML templates (``services/views/templates``, Jinja2, autoescaped): the UI's pages
(``gpufleet.airflow.ui.pages``) and the nightly report, which the nightly writes to a file and
the UI's "Fleet report" tab serves, render through this environment and no other. Text from the
ledger (reasons carrying NCCL WARN lines or a cloud API's error message) is always text.

The pages carry no inline script or style (the plugin's Content-Security-Policy allows
neither): ``gpufleet.css`` is served by the UI at ``{PREFIX}/static/gpufleet.css``; a report
written as a file (``standalone``) carries it inline, as it is opened without the UI.
"""

from __future__ import annotations

from functools import cache, lru_cache
from pathlib import Path
from typing import Any
from urllib.parse import quote

from jinja2 import Environment, FileSystemLoader, select_autoescape
from markupsafe import Markup

PREFIX = "/gpufleet"  # where the UI serves the plugin's pages (``gpufleet_plugin.py``)
TEMPLATES = Path(__file__).parent / "templates"
STYLESHEET = TEMPLATES / "gpufleet.css"


def num(value: float | None, spec: str = ".1f") -> str:
    return "-" if value is None else format(value, spec)


def when(value: Any) -> str:
    return "-" if value is None else f"{value:%Y-%m-%d %H:%M} UTC"


def run_link(dag_id: str, run_id: str) -> str:
    """The Airflow UI's page of a DAG run."""
    return f"/dags/{quote(dag_id, safe='')}/runs/{quote(run_id, safe='')}"


@lru_cache(maxsize=4096)
def _path_part(text: str) -> str:
    """``text`` quoted as one URL path segment (the fleet page quotes 2,000 pools' names, a few
    hundred distinct)."""
    return quote(text, safe="")


@cache
def environment() -> Environment:
    from gpufleet.services.views.cells import fabric_text, lustre_text
    from gpufleet.services.views.health import actions_text, health_text, levels_text

    env = Environment(
        loader=FileSystemLoader(TEMPLATES),
        autoescape=select_autoescape(default=True, default_for_string=True),
        trim_blocks=True,
    )
    env.filters["u"] = lambda s: _path_part(str(s))
    # a table row's cells as filters too: a filter is called directly, a global through the
    # template context (the fleet page calls these 2,000 times)
    env.filters.update(
        num=num, fabric_text=fabric_text, lustre_text=lustre_text, health_text=health_text
    )
    env.globals.update(
        prefix=PREFIX,
        num=num,
        when=when,
        run_link=run_link,
        fabric_text=fabric_text,
        lustre_text=lustre_text,
        health_text=health_text,
        levels_text=levels_text,
        actions_text=actions_text,
    )
    return env


def render(template: str, *, standalone: bool = False, **context: Any) -> str:
    """``template`` rendered with ``context`` (autoescaped). ``standalone``: a file opened
    without the UI, which carries the stylesheet inline instead of linking the UI's."""
    style = Markup(STYLESHEET.read_text()) if standalone else None  # our own file, not data
    return environment().get_template(template).render(inline_style=style, **context)
