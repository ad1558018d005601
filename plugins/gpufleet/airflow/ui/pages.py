"""The UI's HTML: Jinja2 templates (``templates/``, autoescaped) over ``services.fleet_view``'s
records.

The element ids, classes and data attributes are a contract with the browser tests
(``tests/browser``) and docs/ui.md: keep them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import quote

from jinja2 import Environment, select_autoescape

PREFIX = "/gpufleet"
TEMPLATES = Path(__file__).parent / "templates"


def _num(value: float | None, spec: str = ".1f") -> str:
    return "-" if value is None else format(value, spec)


def _when(value: Any) -> str:
    return "-" if value is None else f"{value:%Y-%m-%d %H:%M} UTC"


def run_link(dag_id: str, run_id: str) -> str:
    """The Airflow UI's page of a DAG run."""
    return f"/dags/{quote(dag_id, safe='')}/runs/{quote(run_id, safe='')}"


def _env() -> Environment:
    from jinja2 import FileSystemLoader

    from gpufleet.services.fleet_view import fabric_text, lustre_text

    env = Environment(
        loader=FileSystemLoader(TEMPLATES),
        autoescape=select_autoescape(default=True, default_for_string=True),
        trim_blocks=True,
    )
    env.filters["u"] = lambda s: quote(str(s), safe="")
    env.globals.update(
        prefix=PREFIX,
        num=_num,
        when=_when,
        run_link=run_link,
        fabric_text=fabric_text,
        lustre_text=lustre_text,
    )
    return env


_ENV = _env()


def _json_for_script(data: Any) -> str:
    """JSON safe inside <script>: no ``</`` or ``<!--`` can close or confuse the element."""
    text = json.dumps(data, default=str, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def fleet_page(
    pools: list[dict], cost: dict, now: Any, regions: list[str], states: list[str], **filters
) -> str:
    from urllib.parse import urlencode

    query = urlencode({k: v for k, v in filters.items() if v})
    return _ENV.get_template("fleet.html").render(
        title="GPU fleet",
        pools=pools,
        cost=cost,
        now=f"{now:%Y-%m-%d %H:%M}",
        ready=sum(p["ready"] for p in pools),
        regions=regions,
        states=states,
        query=f"?{query}" if query else "",
        **filters,
    )


def chart_data(view: dict) -> dict:
    """The pool page's ``#pool-data``: the nights and the lines the charts draw."""
    keys = (
        "run_id",
        "night",
        "busbw_gbps",
        "small_latency_us",
        "passed",
        "verdict",
        "transport",
        "read_mb_s",
        "write_mb_s",
    )
    return {
        "nights": [{k: n[k] for k in keys} for n in view["nights"]],
        "baseline_gbps": view["baseline_gbps"],
        "tolerance_gbps": view["tolerance_gbps"],
        "expected_mb_s": view["expected_mb_s"],
    }


def pool_page(view: dict) -> str:
    data = _json_for_script(chart_data(view))
    # the JSON is already escaped for a <script> element: mark it safe for Jinja
    from markupsafe import Markup

    return _ENV.get_template("pool.html").render(
        title=f"{view['cluster']}/{view['pool']}", v=view, data=Markup(data)
    )


def message_page(title: str, heading: str, message: str) -> str:
    return _ENV.get_template("message.html").render(title=title, heading=heading, message=message)
