"""The nightly validation report (Markdown, HTML with a bus bandwidth chart per pool) and
Prometheus metrics (textfile-collector format): ledger rows in, text out; ``write_reports``
writes the files. A validation that could not finish (verdict ``error``) shows as ERROR."""

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


def markdown(run_id: str, rows: list[dict[str, Any]], quarantined: list[dict[str, Any]]) -> str:
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
    for line in md_text.splitlines()[2:]:
        if line.startswith("## "):
            body.append(f"<h2>{html.escape(line[3:])}</h2>")
        elif line.startswith("|---"):
            continue
        elif line.startswith("| "):
            cells = [html.escape(c.strip()) for c in line.strip("|").split("|")]
            tag = "th" if "verdict" in cells else "td"
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


def _labels(**kv: str) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in kv.items()) + "}"


def prometheus(rows: Iterable[dict[str, Any]], quarantined: list[dict[str, Any]]) -> str:
    """Metrics for node_exporter's textfile collector."""
    metrics: dict[str, tuple[str, list[str]]] = {
        "gpufleet_validation_passed": ("1 when the pool passed its last validation", []),
        "gpufleet_fabric_transport_ok": ("1 when NCCL used the expected transport", []),
        "gpufleet_fabric_busbw_gbps": ("lowest large-message all-reduce busbw of a pool", []),
        "gpufleet_fabric_baseline_gbps": ("expected large-message busbw", []),
        "gpufleet_lustre_read_mb_s": ("aggregate fio read throughput", []),
        "gpufleet_lustre_write_mb_s": ("aggregate fio write throughput", []),
        "gpufleet_lustre_expected_mb_s": ("tier x capacity", []),
        "gpufleet_quarantined_nodes": ("nodes quarantined in a pool", []),
    }

    def add(name: str, labels: str, value: float | None) -> None:
        if value is not None:
            metrics[name][1].append(f"{name}{labels} {value:g}")

    for r in rows:
        lab = _labels(cluster=r["cluster"], pool=r["pool"], kind=r["kind"])
        add("gpufleet_validation_passed", lab, 1 if r["passed"] else 0)
        pl = _labels(cluster=r["cluster"], pool=r["pool"])
        if r["kind"] == "fabric":
            ok = r["transport"] == r["expected_transport"] if r["transport"] else None
            add("gpufleet_fabric_transport_ok", pl, None if ok is None else int(ok))
            add("gpufleet_fabric_busbw_gbps", pl, r["busbw_gbps"])
            add("gpufleet_fabric_baseline_gbps", pl, r["baseline_gbps"])
        else:
            add("gpufleet_lustre_read_mb_s", pl, r["read_mb_s"])
            add("gpufleet_lustre_write_mb_s", pl, r["write_mb_s"])
            add("gpufleet_lustre_expected_mb_s", pl, r["expected_mb_s"])
    counts: dict[tuple[str, str], int] = {}
    for q in quarantined:
        counts[(q["cluster"], q["pool"])] = counts.get((q["cluster"], q["pool"]), 0) + 1
    for (cluster, pool), n in sorted(counts.items()):
        add("gpufleet_quarantined_nodes", _labels(cluster=cluster, pool=pool), n)
    out = []
    for name, (help_text, samples) in metrics.items():
        if samples:
            out += [f"# HELP {name} {help_text}", f"# TYPE {name} gauge", *samples]
    return "\n".join(out) + "\n"


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
