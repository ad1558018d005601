"""The nightly's report (a view of the ledger): drift is judged first
(``gpufleet.services.validation.drift.assess_drift``: each pool's figures tonight against its own
recent passing nights; a drifting pool is marked ``drifting`` and the findings are recorded on
its validation row), then the Markdown/HTML report is rendered with a Drift section and what
validation cost. Drift is a warning: ``NightlyReport.warnings`` carries the findings, the run
does not fail for them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from gpufleet.config.paths import state_dir
from gpufleet.domain.fleet import Catalog
from gpufleet.domain.validation_kinds import ValidationKind
from gpufleet.domain.verdicts import latest_per_check
from gpufleet.errors import GpufleetError
from gpufleet.services.validation.drift import assess_drift
from gpufleet.services.views.report import drift_texts, html_report, markdown, write_reports
from gpufleet.store import Ledger


def _safe(run_id: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", run_id)


@dataclass
class NightlyReport:
    """What ``nightly_report`` wrote (``paths``: file name -> path), the checks that did not
    pass (one line each: failed or could not finish) and the warnings (``cluster/pool: <drift
    finding with its figures>``: the pool still passes)."""

    paths: dict[str, str]
    markdown: str
    failed: list[str]
    checks: int
    warnings: list[str] = field(default_factory=list)
    not_validated: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON (an XCom)."""
        return {
            "paths": dict(self.paths),
            "markdown": self.markdown,
            "failed": list(self.failed),
            "checks": self.checks,
            "warnings": list(self.warnings),
            "not_validated": list(self.not_validated),
        }


def render_report(
    ledger: Ledger,
    catalog: Catalog,
    run_id: str,
    rows: list[dict[str, Any]],
    warnings: list[str] | None = None,
    history_nights: int = 14,
    *,
    standalone: bool = False,
) -> tuple[str, str]:
    """The report of a run over its ``rows`` (``latest_per_check``): Markdown, and HTML with
    each fabric pool's recent nights charted against its baseline, rendered by the UI's
    templates. The nightly writes it (``standalone``: a file, its stylesheet inline); the UI's
    run tab renders it again from the ledger. A pool since removed from the catalog is charted
    against the baseline its row recorded."""
    from gpufleet.config.baselines import find_baseline

    quarantined = ledger.quarantined()
    md_text = markdown(run_id, rows, quarantined, warnings)
    histories, baselines = {}, {}
    for r in rows:
        if r["kind"] != ValidationKind.FABRIC:
            continue
        key = f"{r['cluster']}/{r['pool']}"
        histories[key] = ledger.validation_history(
            r["cluster"], r["pool"], ValidationKind.FABRIC, history_nights
        )
        try:
            ref = catalog.pool(r["cluster"], r["pool"])
        except GpufleetError:
            baselines[key] = r["baseline_gbps"]
            continue
        base = find_baseline(
            ref.pool.gpu.model, ref.pool.gpu.count, 2, "all_reduce", ref.pool.transport
        )
        baselines[key] = base.busbw_gbps if base else None
    page = html_report(
        run_id, rows, quarantined, histories, baselines, warnings, standalone=standalone
    )
    md_text, page = _with_tier(ledger, catalog, rows, md_text, page)
    md_text, page = _with_reliability(ledger, rows, md_text, page)
    return _with_approvals(ledger, rows, md_text, page)


TIER_HEAD = "Nightly tier (docs/validation.md#what-validation-costs)"
RELIABILITY_HEAD = "Reliability"
APPROVALS_HEAD = "Approvals"


def _report_end(ledger: Ledger, rows: list[dict[str, Any]]) -> Any:
    """The run's last verdict's time (now when none finished): what the sections read up to."""
    ends = [r["finished_at"] for r in rows if r.get("finished_at") is not None]
    return max(ends) if ends else ledger.clock.now()


def _with_section(
    md_text: str, html_text: str, section_id: str, head: str, lines: list[str]
) -> tuple[str, str]:
    """The report (Markdown and HTML) with a section of ``lines`` at its end; as it was when
    there are none."""
    from markupsafe import escape

    if not lines:
        return md_text, html_text
    md_text = (
        md_text.rstrip("\n") + "\n\n" + "\n".join([f"## {head}", "", *(f"- {x}" for x in lines)])
    )
    md_text += "\n"
    items = "".join(f"<li>{escape(x)}</li>" for x in lines)
    block = f'<section id="{section_id}"><h2>{escape(head)}</h2><ul>{items}</ul></section>'
    body, sep, tail = html_text.rpartition("</body>")
    html_text = body + block + sep + tail if sep else html_text + block
    return md_text, html_text


def _with_tier(
    ledger: Ledger, catalog: Catalog, rows: list[dict[str, Any]], md_text: str, html_text: str
) -> tuple[str, str]:
    """The report with the run's nightly tier (``views.cost.tier_lines``: what a night costs
    on average over the pools that passed, and what this one spent beyond it); nothing when
    the rows record no stages."""
    from gpufleet.services.views.cost import fleet_stages, tier_lines

    if not fleet_stages(rows)["per_node"]:
        return md_text, html_text
    lines = tier_lines(rows, catalog, ledger)
    return _with_section(md_text, html_text, "tier", TIER_HEAD, lines)


def _with_approvals(
    ledger: Ledger, rows: list[dict[str, Any]], md_text: str, html_text: str
) -> tuple[str, str]:
    """The report with the approvals waiting for a person and those answered in the day up to
    the run's last verdict (``services.views.approvals``: who, when, what came of it); nothing
    when there are none."""
    from gpufleet.services.views.approvals import approval_lines

    head = f"{APPROVALS_HEAD} (docs/remediation.md#approvals)"
    lines = approval_lines(ledger, _report_end(ledger, rows))
    return _with_section(md_text, html_text, "approvals", head, lines)


def _with_reliability(
    ledger: Ledger, rows: list[dict[str, Any]], md_text: str, html_text: str
) -> tuple[str, str]:
    """The report with a line per pool with node incidents in the 30 days up to the run's last
    verdict (``services.views.reliability.report_lines``: MTTR, MTBI, open incidents), so the
    UI's run tab renders the same section the nightly wrote; nothing when no pool had one."""
    from gpufleet.services.views.reliability import WINDOW, report_lines

    head = f"{RELIABILITY_HEAD} (node incidents, last {WINDOW.days} days)"
    lines = report_lines(ledger, _report_end(ledger, rows))
    return _with_section(md_text, html_text, "reliability", head, lines)


def nightly_report(
    ledger: Ledger,
    catalog: Catalog,
    run_id: str,
    history_nights: int = 14,
    *,
    runs: list[str] | None = None,
    not_validated: list[str] | None = None,
) -> NightlyReport:
    """Judge drift, then write the run's Markdown/HTML report; return paths, failures and
    warnings (drift). Each pool and kind is reported by its last verdict in the run.

    ``runs``: the report of a planner run (``run_id``) over the verdicts its cluster runs
    recorded; each of them judged its own pools' drift, so the findings are read, not judged
    again.

    ``not_validated``: one line per planned check the run recorded no verdict for, and why
    (``services.validation.unvalidated``); the report says so under its summary."""
    if runs is None:
        warnings = drift_warnings(ledger, catalog, run_id)  # records the findings on the rows
        rows = latest_per_check(ledger.validations_for_run(run_id))
    else:
        rows = latest_per_check([r for child in runs for r in ledger.validations_for_run(child)])
        warnings = drift_texts(rows)
    md_text, html_text = render_report(
        ledger, catalog, run_id, rows, warnings, history_nights, standalone=True
    )
    if not_validated:
        md_text, html_text = _with_not_validated(md_text, html_text, not_validated, len(rows))
    files = {"report.md": md_text, "report.html": html_text}
    paths = write_reports(state_dir() / "reports" / _safe(run_id), files)
    failed = [
        f"{r['cluster']}/{r['pool']} {r['kind']}"
        f"{' could not finish' if r.get('verdict') == 'error' else ''}: "
        f"{'; '.join(r['reasons'][:2])}"
        for r in rows
        if r["passed"] is not True
    ]
    return NightlyReport(
        paths=paths,
        markdown=md_text,
        failed=failed,
        checks=len(rows),
        warnings=warnings,
        not_validated=list(not_validated or ()),
    )


NOT_VALIDATED_HEAD = "Not validated by this run"


def _with_not_validated(
    md_text: str, html_text: str, lines: list[str], checks: int
) -> tuple[str, str]:
    """The report with a section under its summary naming what the run did not validate (a
    run that recorded nothing says it first: "0 of 0 checks passed" must not read green)."""
    from markupsafe import escape

    lead = (
        f"VALIDATED NOTHING: {len(lines)} planned checks recorded no verdict"
        if checks == 0
        else f"{len(lines)} planned checks recorded no verdict"
    )
    md_lines = md_text.split("\n")
    at = next((i for i, line in enumerate(md_lines) if line.startswith("**")), 0) + 1
    section = ["", f"## {NOT_VALIDATED_HEAD}", "", f"**{lead}**", ""]
    section += ["- " + " ".join(line.split()).replace("|", "\\|") for line in lines]
    md_text = "\n".join(md_lines[:at] + section + md_lines[at:])
    items = "".join(f"<li>{escape(line)}</li>" for line in lines)
    block = (
        f'<section id="not-validated"><h2>{escape(NOT_VALIDATED_HEAD)}</h2>'
        f"<p><strong>{escape(lead)}</strong></p><ul>{items}</ul></section>"
    )
    head, sep, tail = html_text.partition("</h1>")
    html_text = head + sep + block + tail if sep else block + html_text
    return md_text, html_text


def drift_warnings(ledger: Ledger, catalog: Catalog, run_id: str) -> list[str]:
    """Judge drift for the run's pools (``services.validation.drift.assess_drift``, which marks
    drifting
    pools and records its findings on their rows); one ``cluster/pool: <finding with its
    figures>`` line per finding."""
    return [drift.text() for drift in assess_drift(ledger, catalog, run_id)]
