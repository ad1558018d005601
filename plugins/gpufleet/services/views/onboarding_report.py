"""A region onboarding run's report (a view of the ledger): what each step found, created,
would create or refused, with its differences and console links."""

from __future__ import annotations

import re

from gpufleet.config.paths import state_dir
from gpufleet.services.views.report import write_reports
from gpufleet.store import Ledger


def onboarding_report(ledger: Ledger, region: str, run_id: str) -> tuple[str, str]:
    """A run's onboarding report in Markdown (what each step found, created, would create or
    refused, differences, console links; the region's state), written under
    ``<state dir>/reports/onboarding/<region>/<run>/report.md`` (and ``.../latest/``).
    Returns (text, path)."""
    actions = ledger.onboarding_actions(region, run_id)
    state = ledger.region_state(region) or {}
    lines = [
        f"# Region onboarding: {region}",
        "",
        f"Run `{run_id}`. Region state: **{state.get('state', 'not onboarded')}**"
        + (f" ({state['reason']})" if state.get("reason") else ""),
        "",
        "| step | resource | action | status | differences / reason |",
        "|---|---|---|---|---|",
    ]
    for a in actions:
        name = f"[{a['name']}]({a['console_url']})" if a.get("console_url") else a["name"]
        why = "; ".join(a.get("differences") or []) or (a.get("detail") or {}).get("reason", "")
        lines.append(
            f"| {a['step']} | {a['kind']} {name} | {a['action']} | {a.get('status') or ''} "
            f"| {why} |"
        )
    if not actions:
        lines.append("| | | nothing recorded | | |")
    text = "\n".join(lines) + "\n"
    folder = state_dir() / "reports" / "onboarding" / region / re.sub(r"[^\w.-]+", "_", run_id)
    paths = write_reports(folder, {"report.md": text})
    return text, paths["report.md"]
