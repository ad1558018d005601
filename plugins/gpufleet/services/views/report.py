"""The nightly validation report: ledger rows in, Markdown (alerts, text) and HTML out;
``write_reports`` writes the files. One model of the report (``report_model``) feeds both; the
HTML (with a bus bandwidth chart per pool) is rendered by the UI's own autoescaping templates
(``services.views.render``: ``report.html``, ``chart.svg``), so the file the nightly writes and the
run's "Fleet report" tab are one rendering, and a reason carrying markup is text. In the
Markdown a reason's ``|`` is escaped and its line breaks are spaces: it stays in its cell.

A validation that could not finish (verdict ``error``) shows as ERROR. Drift findings, GPU
health (the ``health`` rows: ``levels``, each unhealthy node's action, ``services.views.health``)
and what validation cost come from the rows' ``details`` (``drift``; ``gpu_minutes``,
``gpu_minutes_per_node``, ``cost_nodes``), so a report rendered later from the ledger says the
same. Prometheus metrics are served live by the UI's ``/metrics``
(``gpufleet.airflow.ui.metrics``)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from gpufleet.domain.validation_kinds import ValidationKind
from gpufleet.services.views.cells import details_of
from gpufleet.services.views.health import (
    actions_text,
    levels_of,
    levels_text,
    unhealthy_nodes,
)


def _fmt(value: float | None, spec: str = ".1f") -> str:
    return "-" if value is None else format(value, spec)


def _status(row: dict[str, Any]) -> str:
    """PASS, FAIL, or ERROR for a validation that could not finish (verdict ``error``)."""
    if row.get("verdict") == "error":
        return "ERROR"
    return "PASS" if row["passed"] is True else "FAIL"


def _figure(value: Any) -> float | None:
    """A finite number from ``details`` (read defensively: anything else is absent)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def drift_texts(rows: Iterable[dict[str, Any]]) -> list[str]:
    """``cluster/pool: <finding text>`` for every drift finding the rows record
    (``details["drift"]``, each with its ``text``)."""
    out = []
    for r in rows:
        findings = details_of(r).get("drift")
        for f in findings if isinstance(findings, list) else ():
            text = f.get("text") if isinstance(f, dict) else None
            if isinstance(text, str) and text:
                out.append(f"{r['cluster']}/{r['pool']}: {text}")
    return out


def validation_cost(rows: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """What the rows' validations cost: per pool, GPU-minutes and GPU-minutes per node (the
    pool's figures per node of every kind added up: fabric + storage + health), and over every
    pool that reports a
    cost, GPU-minutes in total and per node (total / the nodes the pools' validations cover).
    Rows without cost figures (recorded before costs were measured, or that ran nothing) are
    left out."""
    pools: dict[str, dict[str, Any]] = {}
    for r in rows:
        details = details_of(r)
        minutes, per_node = (
            _figure(details.get("gpu_minutes")),
            _figure(details.get("gpu_minutes_per_node")),
        )
        if minutes is None or per_node is None:
            continue
        pool = pools.setdefault(
            f"{r['cluster']}/{r['pool']}", {"gpu_minutes": 0.0, "per_node": 0.0, "nodes": 0}
        )
        pool["gpu_minutes"] += minutes
        pool["per_node"] += per_node
        nodes = _figure(details.get("cost_nodes"))
        pool["nodes"] = max(pool["nodes"], int(nodes) if nodes else round(minutes / per_node))
    total = sum(p["gpu_minutes"] for p in pools.values())
    nodes = sum(p["nodes"] for p in pools.values())
    return {
        "pools": pools,
        "gpu_minutes": total if pools else None,
        "nodes": nodes,
        "per_node": total / nodes if nodes else None,
    }


def cost_line(cost: dict[str, Any]) -> str:
    """``Validation cost: 3.2 GPU-minutes per node per night (412.0 GPU-minutes, 128 nodes)``."""
    if cost["per_node"] is None:
        return "Validation cost: not measured in this run."
    return (
        f"Validation cost: {cost['per_node']:.1f} GPU-minutes per node per night "
        f"({cost['gpu_minutes']:,.1f} GPU-minutes over {cost['nodes']} nodes)"
    )


def _cell(text: Any) -> str:
    """Text for one Markdown table cell or list line: a ``|`` escaped, line breaks as spaces
    (a reason carrying either cannot open a cell, a row or a heading)."""
    return " ".join(str(text).split()).replace("|", "\\|")


def _summary(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return "No pool was validated in this run."
    failed = sum(_status(r) != "PASS" for r in rows)
    errors = sum(_status(r) == "ERROR" for r in rows)
    return (
        f"{len(rows) - failed} of {len(rows)} checks passed"
        f"{f'; {errors} could not finish' if errors else ''}."
    )


def report_model(
    run_id: str,
    rows: list[dict[str, Any]],
    quarantined: list[dict[str, Any]],
    drift: list[str] | None = None,
) -> dict[str, Any]:
    """What the report says, as plain values (the Markdown and the HTML both render this).
    ``drift``: the drift findings' one-liners (default: those the rows record)."""
    fabric = [
        {
            "pool": f"{r['cluster']}/{r['pool']}",
            "status": _status(r),
            "transport": f"{r['transport'] or '-'} ({r['expected_transport'] or '-'})",
            "busbw": _fmt(r["busbw_gbps"]),
            "baseline": _fmt(r["baseline_gbps"], "g"),
            "nodes": str(r["nodes_tested"] or 0),
            "reasons": "; ".join(r["reasons"]),
        }
        for r in rows
        if r["kind"] == ValidationKind.FABRIC
    ]
    storage = [
        {
            "pool": f"{r['cluster']}/{r['pool']}",
            "status": _status(r),
            "read": _fmt(r["read_mb_s"], ",.0f"),
            "write": _fmt(r["write_mb_s"], ",.0f"),
            "expected": _fmt(r["expected_mb_s"], ",.0f"),
            "reasons": "; ".join(r["reasons"]),
        }
        for r in rows
        if r["kind"] == ValidationKind.STORAGE
    ]
    health = [_health_entry(r) for r in rows if r["kind"] == ValidationKind.HEALTH]
    cost = validation_cost(rows)
    return {
        "run_id": run_id,
        "summary": _summary(rows),
        "drift": drift_texts(rows) if drift is None else drift,
        "fabric": fabric,
        "storage": storage,
        "health": health,
        "cost": [
            {
                "pool": pool,
                "gpu_minutes": f"{c['gpu_minutes']:,.1f}",
                "per_node": f"{c['per_node']:.2f}",
            }
            for pool, c in cost["pools"].items()
        ],
        "cost_line": cost_line(cost),
        "quarantined": [
            {
                "pool": f"{q['cluster']}/{q['pool']}",
                "node": q["node"],
                "since": f"{q['quarantined_at']:%Y-%m-%d %H:%M} UTC",
                "reason": q["reason"],
            }
            for q in quarantined
        ],
    }


def _health_entry(r: dict[str, Any]) -> dict[str, str]:
    """One pool's GPU health row in the report: levels, nodes checked, unhealthy nodes and
    their actions (``details``, read defensively)."""
    raw = r.get("details")
    details = raw if isinstance(raw, dict) else {}
    nodes = unhealthy_nodes(details)
    actions: dict[str, int] = {}
    for n in nodes:
        actions[n["action"]] = actions.get(n["action"], 0) + 1
    return {
        "pool": f"{r['cluster']}/{r['pool']}",
        "status": _status(r),
        "levels": levels_text(levels_of(details)),
        "nodes": str(r.get("nodes_tested") or 0),
        "unhealthy": str(len(nodes)),
        "actions": actions_text(actions) or "-",
        "reasons": "; ".join(r.get("reasons") or []),
    }


FABRIC_HEAD = "Fabric (2-node NCCL all-reduce)"
STORAGE_HEAD = "Lustre throughput (fio)"
HEALTH_HEAD = "GPU health (dcgmi diag and each node's signals)"
DRIFT_NOTE = "Figures moving away from the pool's own recent nights (a warning: still passing)."


def markdown(
    run_id: str,
    rows: list[dict[str, Any]],
    quarantined: list[dict[str, Any]],
    drift: list[str] | None = None,
) -> str:
    """The run's report as Markdown. ``drift``: the drift findings' one-liners (default: those
    the rows record in ``details["drift"]``)."""
    m = report_model(run_id, rows, quarantined, drift)
    keys: tuple[str, ...]  # each table's columns
    out = [f"# Nightly fabric validation: {_cell(run_id)}", "", f"**{m['summary']}**", ""]
    if m["drift"]:
        out += ["## Drift", "", DRIFT_NOTE, ""]
        out += [f"- {_cell(line)}" for line in m["drift"]]
        out.append("")
    if m["fabric"]:
        out += [
            f"## {FABRIC_HEAD}",
            "",
            "| pool | verdict | transport (expected) | lowest busbw GB/s | baseline GB/s "
            "| nodes tested | reasons |",
            "|---|---|---|---:|---:|---:|---|",
        ]
        keys = ("pool", "status", "transport", "busbw", "baseline", "nodes", "reasons")

        out += ["| " + " | ".join(_cell(f[k]) for k in keys) + " |" for f in m["fabric"]]
        out.append("")
    if m["storage"]:
        out += [
            f"## {STORAGE_HEAD}",
            "",
            "| pool | verdict | read MB/s | write MB/s | expected MB/s | reasons |",
            "|---|---|---:|---:|---:|---|",
        ]
        keys = ("pool", "status", "read", "write", "expected", "reasons")
        out += ["| " + " | ".join(_cell(s[k]) for k in keys) + " |" for s in m["storage"]]
        out.append("")
    if m["health"]:
        out += [
            f"## {HEALTH_HEAD}",
            "",
            "| pool | verdict | dcgmi diag levels | nodes checked | unhealthy | actions "
            "| reasons |",
            "|---|---|---|---:|---:|---|---|",
        ]
        keys = ("pool", "status", "levels", "nodes", "unhealthy", "actions", "reasons")
        out += ["| " + " | ".join(_cell(h[k]) for k in keys) + " |" for h in m["health"]]
        out.append("")
    if m["cost"]:
        out += ["## Validation cost", "", "| pool | GPU-minutes | GPU-minutes per node |"]
        out.append("|---|---:|---:|")
        out += [f"| {_cell(c['pool'])} | {c['gpu_minutes']} | {c['per_node']} |" for c in m["cost"]]
        out += ["", f"**{m['cost_line']}.**", ""]
    if m["quarantined"]:
        out += ["## Quarantined nodes", ""]
        out += [
            f"- {_cell(q['pool'])} `{_cell(q['node'])}` since {q['since']}: {_cell(q['reason'])}"
            for q in m["quarantined"]
        ]
        out.append("")
    return "\n".join(out)


def chart_model(
    history: list[dict[str, Any]], baseline: float | None, width: int = 420, height: int = 140
) -> dict[str, Any]:
    """Bus bandwidth per night as bars (failed nights flagged) and the baseline's height: the
    geometry ``chart.svg`` draws."""
    values = [h["busbw_gbps"] or 0.0 for h in history]
    top = max([*values, baseline or 0.0, 1.0]) * 1.1
    bar_w = (width - 40) / max(len(values), 1)
    bars = []
    for i, (h, v) in enumerate(zip(history, values, strict=True)):
        bh = (height - 20) * v / top
        bars.append(
            {
                "x": f"{35 + i * bar_w:.1f}",
                "y": f"{height - 10 - bh:.1f}",
                "w": f"{max(bar_w - 2, 1):.1f}",
                "h": f"{bh:.1f}",
                "failed": not h["passed"],
                "title": f"{h['finished_at']:%Y-%m-%d}: {v:.1f} GB/s "
                f"({h['transport'] or 'unknown'})",
            }
        )
    base_y = height - 10 - (height - 20) * baseline / top if baseline else None
    return {
        "width": width,
        "height": height,
        "top": f"{top:.0f}",
        "bars": bars,
        "baseline": f"{baseline:g}" if baseline else None,
        "baseline_y": None if base_y is None else f"{base_y:.1f}",
        "baseline_label_y": None if base_y is None else f"{base_y - 3:.1f}",
        "baseline_label_x": width - 90,
    }


def svg_chart(
    history: list[dict[str, Any]], baseline: float | None, width: int = 420, height: int = 140
) -> str:
    """Bus bandwidth per night as bars (red when the night failed) with the baseline line."""
    from gpufleet.services.views.render import render

    return render("chart.svg", c=chart_model(history, baseline, width, height))


def html_report(
    run_id: str,
    rows: list[dict[str, Any]],
    quarantined: list[dict[str, Any]],
    histories: dict[str, list[dict[str, Any]]],
    baselines: dict[str, float | None],
    drift: list[str] | None = None,
    *,
    standalone: bool = False,
) -> str:
    """The run's report as an HTML page, through the UI's templates (``report.html``): served
    by the UI's run tab, or written as a file (``standalone``: its stylesheet inline)."""
    from gpufleet.services.views.render import render

    return render(
        "report.html",
        standalone=standalone,
        title=f"gpufleet {run_id}",
        r=report_model(run_id, rows, quarantined, drift),
        headings={
            "fabric": FABRIC_HEAD,
            "storage": STORAGE_HEAD,
            "health": HEALTH_HEAD,
            "drift": DRIFT_NOTE,
        },
        charts=[
            {"pool": pool, **chart_model(history, baselines.get(pool))}
            for pool, history in histories.items()
        ],
    )


def write_reports(folder: Path, files: dict[str, str]) -> dict[str, str]:
    """Write the report files into ``folder`` and ``folder/../latest``; return their paths."""
    paths = {}
    latest = folder.parent / "latest"
    for target in (folder, latest):
        target.mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            (target / name).write_text(text)
    for name in files:
        paths[name] = str(folder / name)
    return paths
