"""The UI's HTML: the one set of autoescaped Jinja2 templates (``services.views.render``, shared
with
the nightly report) over ``services.views.fleet``'s and ``.pool``'s records.

The element ids, classes and data attributes are a contract with the browser tests
(``tests/browser``) and docs/ui.md: keep them. No page carries inline script or style: the
plugin's Content-Security-Policy (``app.SECURITY_HEADERS``) allows neither."""

from __future__ import annotations

import json
from typing import Any

from gpufleet.services.views.render import PREFIX, render, run_link

__all__ = ["PREFIX", "chart_data", "fleet_page", "message_page", "pool_page", "run_link"]


def _json_for_script(data: Any) -> str:
    """JSON safe inside <script>: no ``</`` or ``<!--`` can close or confuse the element."""
    text = json.dumps(data, default=str, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def fleet_page(  # noqa: PLR0913  the page's parts, then its filters
    pools: list[dict],
    cost: dict,
    now: Any,
    regions: list[str],
    states: list[str],
    safety: dict | None = None,
    **filters,
) -> str:
    from urllib.parse import urlencode

    query = urlencode({k: v for k, v in filters.items() if v})
    return render(
        "fleet.html",
        title="GPU fleet",
        pools=pools,
        cost=cost,
        now=f"{now:%Y-%m-%d %H:%M}",
        ready=sum(p["ready"] for p in pools),
        regions=regions,
        states=states,
        safety=safety or {"breakers": [], "approvals": []},
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

    return render("pool.html", title=f"{view['cluster']}/{view['pool']}", v=view, data=Markup(data))


def message_page(title: str, heading: str, message: str) -> str:
    return render("message.html", title=title, heading=heading, message=message)
