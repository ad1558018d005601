"""The nightly validation report (Markdown, HTML with a bus bandwidth chart per pool): ledger
rows in, text out; ``write_reports`` writes the files. A validation that could not finish
(verdict ``error``) shows as ERROR. Drift findings and what validation cost come from the rows'
``details`` (``drift``; ``gpu_minutes``, ``gpu_minutes_per_node``, ``cost_nodes``), so a report
rendered later from the ledger says the same. Prometheus metrics are served live by the UI's
``/metrics`` (``gpufleet.airflow.ui.metrics``)."""

from __future__ import annotations

import html
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any


def _fmt(value: float | None, spec: str = ".1f") -> str:
    return "-" if value is None else format(value, spec)


def _status(row: dict[str, Any]) -> str:
    """PASS, FAIL, or ERROR for a validation that could not finish (verdict ``error``)."""
    if row.get("verdict") == "error":
        return "ERROR"
    return "PASS" if row["passed"] is True else "FAIL"


def _figure(value: Any) -> float | None:
    """A number from ``details`` (read defensively: anything else is absent)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def drift_texts(rows: Iterable[dict[str, Any]]) -> list[str]:
    """``cluster/pool: <finding text>`` for every drift finding the rows record
    (``details["drift"]``, each with its ``text``)."""
    out = []
    for r in rows:
        findings = (r.get("details") or {}).get("drift")
        for f in findings if isinstance(findings, list) else ():
            text = f.get("text") if isinstance(f, dict) else None
            if isinstance(text, str) and text:
                out.append(f"{r['cluster']}/{r['pool']}: {text}")
    return out


def validation_cost(rows: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """What the rows' validations cost: per pool, GPU-minutes and GPU-minutes per node (the
    pool's fabric and storage figures per node added up), and over every pool that reports a
    cost, GPU-minutes in total and per node (total / the nodes the pools' validations cover).
    Rows without cost figures (recorded before costs were measured, or that ran nothing) are
    left out."""
    pools: dict[str, dict[str, Any]] = {}
    for r in rows:
        details = r.get("details") or {}
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


def markdown(
    run_id: str,
    rows: list[dict[str, Any]],
    quarantined: list[dict[str, Any]],
    drift: list[str] | None = None,
) -> str:
    """The run's report. ``drift``: the drift findings' one-liners (default: those the rows
    record in ``details["drift"]``)."""
    drift = drift_texts(rows) if drift is None else drift
    fabric = [r for r in rows if r["kind"] == "fabric"]
    storage = [r for r in rows if r["kind"] == "storage"]
    failed = [r for r in rows if _status(r) != "PASS"]
    errors = [r for r in rows if _status(r) == "ERROR"]
    out = [f"# Nightly fabric validation: {run_id}", ""]
    out.append(
        f"**{len(rows) - len(failed)} of {len(rows)} checks passed"
        f"{f'; {len(errors)} could not finish' if errors else ''}.**"
        if rows
        else "**No pool was validated in this run.**"
    )
    out.append("")
    if drift:
        out += [
            "## Drift",
            "",
            "Figures moving away from the pool's own recent nights (a warning: still passing).",
            "",
        ]
        out += [f"- {line}" for line in drift]
        out.append("")
    if fabric:
        out += [
            "## Fabric (2-node NCCL all-reduce)",
            "",
            "| pool | verdict | transport (expected) | lowest busbw GB/s | baseline GB/s "
            "| nodes tested | reasons |",
            "|---|---|---|---:|---:|---:|---|",
        ]
        for r in fabric:
            out.append(
                f"| {r['cluster']}/{r['pool']} | {_status(r)} | {r['transport'] or '-'} "
                f"({r['expected_transport'] or '-'}) | {_fmt(r['busbw_gbps'])} | "
                f"{_fmt(r['baseline_gbps'], 'g')} | {r['nodes_tested'] or 0} | "
                f"{'; '.join(r['reasons'])} |"
            )
        out.append("")
    if storage:
        out += [
            "## Lustre throughput (fio)",
            "",
            "| pool | verdict | read MB/s | write MB/s | expected MB/s | reasons |",
            "|---|---|---:|---:|---:|---|",
        ]
        for r in storage:
            out.append(
                f"| {r['cluster']}/{r['pool']} | {_status(r)} | {_fmt(r['read_mb_s'], ',.0f')} | "
                f"{_fmt(r['write_mb_s'], ',.0f')} | {_fmt(r['expected_mb_s'], ',.0f')} | "
                f"{'; '.join(r['reasons'])} |"
            )
        out.append("")
    cost = validation_cost(rows)
    if cost["pools"]:
        out += [
            "## Validation cost",
            "",
            "| pool | GPU-minutes | GPU-minutes per node |",
            "|---|---:|---:|",
        ]
        for pool, c in cost["pools"].items():
            out.append(f"| {pool} | {c['gpu_minutes']:,.1f} | {c['per_node']:.2f} |")
        out += ["", f"**{cost_line(cost)}.**", ""]
    if quarantined:
        out += ["## Quarantined nodes", ""]
        out += [
            f"- {q['cluster']}/{q['pool']} `{q['node']}` since "
            f"{q['quarantined_at']:%Y-%m-%d %H:%M} UTC: {q['reason']}"
            for q in quarantined
        ]
        out.append("")
    return "\n".join(out)


def svg_chart(
    history: list[dict[str, Any]], baseline: float | None, width: int = 420, height: int = 140
) -> str:
    """Bus bandwidth per night as bars (red when the night failed) with the baseline line."""
    values = [h["busbw_gbps"] or 0.0 for h in history]
    top = max([*values, baseline or 0.0, 1.0]) * 1.1
    n = max(len(values), 1)
    bar_w = (width - 40) / n
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'role="img" aria-label="bus bandwidth per night">',
        f'<text x="2" y="12" font-size="10">{top:.0f} GB/s</text>',
    ]
    for i, (h, v) in enumerate(zip(history, values, strict=True)):
        bh = (height - 20) * v / top
        color = "#2d6a4f" if h["passed"] else "#c1121f"
        title = html.escape(
            f"{h['finished_at']:%Y-%m-%d}: {v:.1f} GB/s ({h['transport'] or 'unknown'})"
        )
        parts.append(
            f'<rect x="{35 + i * bar_w:.1f}" y="{height - 10 - bh:.1f}" '
            f'width="{max(bar_w - 2, 1):.1f}" height="{bh:.1f}" fill="{color}">'
            f"<title>{title}</title></rect>"
        )
    if baseline:
        y = height - 10 - (height - 20) * baseline / top
        parts.append(
            f'<line x1="30" x2="{width}" y1="{y:.1f}" y2="{y:.1f}" stroke="#555" '
            f'stroke-dasharray="4 3"/><text x="{width - 90}" y="{y - 3:.1f}" '
            f'font-size="10">baseline {baseline:g}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def html_report(
    run_id: str,
    md_text: str,
    histories: dict[str, list[dict[str, Any]]],
    baselines: dict[str, float | None],
) -> str:
    body = [f"<h1>Nightly fabric validation: {html.escape(run_id)}</h1>"]
    lines = md_text.splitlines()[2:]
    for i, line in enumerate(lines):
        if line.startswith("## "):
            body.append(f"<h2>{html.escape(line[3:])}</h2>")
        elif line.startswith("|---"):
            continue
        elif line.startswith("| "):
            cells = [html.escape(c.strip()) for c in line.strip("|").split("|")]
            header = i + 1 < len(lines) and lines[i + 1].startswith("|---")
            tag = "th" if header else "td"
            cells = [
                f'<span class="{c}">{c}</span>' if c in ("PASS", "FAIL", "ERROR") else c
                for c in cells
            ]
            body.append("<tr>" + "".join(f"<{tag}>{c}</{tag}>" for c in cells) + "</tr>")
        elif line.startswith("- "):
            body.append(f"<li>{html.escape(line[2:])}</li>")
        elif line.strip():
            body.append(f"<p>{html.escape(line.strip('*'))}</p>")
    text = "\n".join(body)
    text = re.sub(r"((?:<tr>.*</tr>\n?)+)", r"<table>\n\1</table>\n", text)
    charts = ["<h2>Bus bandwidth over recent nights</h2>"]
    for pool, history in histories.items():
        charts.append(f"<h3>{html.escape(pool)}</h3>{svg_chart(history, baselines.get(pool))}")
    style = (
        "body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:4px 8px}.PASS{color:#2d6a4f;font-weight:bold}"
        ".FAIL,.ERROR{color:#c1121f;font-weight:bold}"
    )
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>gpufleet {html.escape(run_id)}"
        f"</title><style>{style}</style></head><body>{text}{''.join(charts)}</body></html>\n"
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
