"""Parse ``dcgmi nvlink -s`` (``--link-status``), ``dcgmi nvlink -e -g N`` (``--errors``) and
``dcgmi nvlink -e -g N -j``: the same report types as ``nvidia-smi nvlink``
(:class:`NvlinkErrorReport`).

Design: docs/design/gpu-health-parsers.md.
"""

from __future__ import annotations

import json
import math
import re

from gpufleet.errors import ParseError
from gpufleet.parsing.health.not_run import NotRun
from gpufleet.parsing.health.nvidia_smi import count, snake
from gpufleet.parsing.health.nvlink import NvlinkErrorReport, NvlinkGpuErrors, NvlinkLinkErrors

__all__ = ["parse_dcgmi_nvlink"]

_STATES = {"U": "up", "D": "down", "X": "disabled"}
_ENTITY = re.compile(r"^(?P<kind>gpuId|physicalId)\s+(?P<id>\d{1,6}):$")
_ROW = re.compile(r"^[UDX_](?: [UDX_])*$")
_TREE = re.compile(r"^\|\s*(?P<arrow>-> )?(?P<label>.*?)\s*\|\s*(?P<value>.*?)\s*\|$")
_HEADER = re.compile(r"^\|\s*(?P<text>[^|]*?)\s*\|$")
_GPU_HEADER = re.compile(r"^GPU (?P<id>\d{1,6})$")
_LINK = re.compile(r"^Link (?P<n>\d{1,3})$")
_WARNING = re.compile(
    r"^Warning: Unable to retrieve nvlink (?P<what>.+?) count for link (?P<link>\d+) for gpuId "
    r"(?P<gpu>\d+) - (?P<why>.*)$"
)
_ERROR = re.compile(
    r"^(?:Error: .*|GPU ID \d+ is not valid, return: .*|Unable to connect to host engine.*)$"
)
_SKIP = re.compile(
    r"^(?:\+[-=+]+\+|\|\s*NvLink Link Status\s*\||Key: Up=U, Down=D, Disabled=X, "
    r"Not Supported=_|Link Entities: .*|\d+:\d+(?: +\d+:\d+)*)$"
)
_NAMES = {
    "crc flit error": "crc_flit",
    "crc data error": "crc_data",
    "replay error": "replay",
    "recovery error": "recovery",
}
_MAX_PROBLEMS = 16


def _number(value: str, what: str, problems: list[str]) -> tuple[bool, int | float | None]:
    """A counter's value: an integer, or a ratio such as a bit error rate (``1.5e-12``)."""
    try:
        ratio = float(value)
    except ValueError:
        ratio = None
    if ratio is not None and not value.strip().isdigit() and math.isfinite(ratio) and ratio >= 0:
        return True, ratio
    return count(value.strip(), what, problems)


def _link_status(lines: list[tuple[int, str]], problems: list[str]) -> tuple[list, list]:
    gpus: list[NvlinkGpuErrors] = []
    switches: list[NvlinkGpuErrors] = []
    target: list[NvlinkGpuErrors] | None = None
    entity: tuple[str, int] | None = None
    for number, stripped in lines:
        if stripped == "GPUs:":
            target, entity = gpus, None
        elif stripped == "NvSwitches:":
            target, entity = switches, None
        elif stripped in ("No GPUs found.", "No NvSwitches found."):
            entity = None
        elif _ENTITY.match(stripped) and target is not None:
            found = _ENTITY.match(stripped)
            entity = (found.group("kind"), int(found.group("id")))  # type: ignore[union-attr]
        elif _ROW.match(stripped) and entity is not None and target is not None:
            links = tuple(
                NvlinkLinkErrors(
                    n, state=_STATES.get(char), not_supported=char == "_", inactive=char == "D"
                )
                for n, char in enumerate(stripped.split())
            )
            target.append(NvlinkGpuErrors(entity[1], None, None, links))
            entity = None
        elif not _SKIP.match(stripped):
            problems.append(f"line {number}: unknown line {stripped[:80]!r}")
    return gpus, switches


def _gpu_of(header: list[str]) -> int | None:
    for text in header:
        found = _GPU_HEADER.match(text.strip())
        if found:
            return int(found.group("id"))
    return None


def _freeze(
    gpu_id: int, sections: dict[str, dict[str, str]], problems: list[str]
) -> NvlinkGpuErrors:
    """One GPU of ``-e``: its sections (``Link 0``, ``Error Detail``) and their counters."""
    links: list[NvlinkLinkErrors] = []
    per_gpu: dict[str, int | float | None] = {}
    for section, values in sections.items():
        link = _LINK.match(section)
        counters: dict[str, int | float | None] = {}
        for label, value in values.items():
            name = _NAMES.get(label.lower(), snake(label))
            ok, number = _number(value, f"GPU {gpu_id}: {section}: {label}", problems)
            if ok:
                counters[name] = number
        if link:
            links.append(NvlinkLinkErrors(int(link.group("n")), counters))  # type: ignore[arg-type]
        elif section == "Error Detail":
            per_gpu.update(counters)
        else:
            problems.append(f"GPU {gpu_id}: unknown section {section[:40]!r}")
    return NvlinkGpuErrors(gpu_id, None, None, tuple(links), counters=per_gpu)


def _errors_json(document: dict, problems: list[str]) -> NvlinkGpuErrors:
    gpu_id = _gpu_of([str(h) for h in document.get("header", [])])
    if gpu_id is None:
        raise ParseError(
            "dcgmi nvlink -j: no 'GPU N' in its header (expected the JSON of "
            "'dcgmi nvlink -e -g N -j')"
        )
    sections: dict[str, dict[str, str]] = {}
    body = document.get("body") or {}
    if not isinstance(body, dict):
        raise ParseError("dcgmi nvlink -j: 'body' is not an object")
    for section, node in body.items():
        children = (node or {}).get("children") if isinstance(node, dict) else None
        if not isinstance(children, dict):
            problems.append(f"GPU {gpu_id}: section {section[:40]!r} has no children")
            continue
        sections[section] = {
            label: str(child.get("value", "")) if isinstance(child, dict) else str(child)
            for label, child in children.items()
        }
    return _freeze(gpu_id, sections, problems)


def _errors_tree(lines: list, problems: list[str], not_run: list[NotRun]) -> list:
    header: list[str] = []
    sections: dict[str, dict[str, str]] = {}
    section: str | None = None
    in_body = False
    for number, stripped in lines:
        if stripped.startswith("+="):
            in_body = True
            continue
        if stripped.startswith("+-"):
            continue
        if not in_body:
            found = _HEADER.match(stripped)
            if found:
                header.append(found.group("text"))
                continue
        row = _TREE.match(stripped)
        if row is None:
            problems.append(f"line {number}: unknown line {stripped[:80]!r}")
            continue
        if row.group("arrow"):
            if section is None:
                problems.append(f"line {number}: a counter before any section")
                continue
            sections[section][row.group("label")] = row.group("value")
        else:
            section = row.group("label")
            sections.setdefault(section, {})
    gpu_id = _gpu_of(header)
    if gpu_id is None:
        if not_run:
            return []
        raise ParseError("dcgmi nvlink -e: no 'GPU N' header in its box")
    return [_freeze(gpu_id, sections, problems)]


def parse_dcgmi_nvlink(text: str) -> NvlinkErrorReport:
    """Link states (``dcgmi nvlink -s``) or error counters (``dcgmi nvlink -e -g N``, text or
    ``-j`` JSON) as an :class:`NvlinkErrorReport`."""
    if isinstance(text, bytes | bytearray):
        text = text.decode("utf-8", errors="replace")
    problems: list[str] = []
    not_run: list[NotRun] = []
    stripped_text = text.strip()
    if stripped_text.startswith("{"):
        try:
            document = json.loads(stripped_text)
        except ValueError as e:
            raise ParseError(f"dcgmi nvlink -j: not JSON ({e})") from e
        if not isinstance(document, dict):
            raise ParseError("dcgmi nvlink -j: not a JSON object")
        gpu = _errors_json(document, problems)
        return NvlinkErrorReport((gpu,), tuple(problems[:_MAX_PROBLEMS]))
    lines: list[tuple[int, str]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped:
            continue
        warning = _WARNING.match(stripped)
        if warning:
            not_run.append(
                NotRun(
                    f"dcgmi nvlink {warning.group('what')} of GPU {warning.group('gpu')} "
                    f"link {warning.group('link')}",
                    warning.group("why"),
                )
            )
            continue
        if _ERROR.match(stripped):
            not_run.append(NotRun("dcgmi nvlink", stripped[:200]))
            continue
        lines.append((number, stripped))
    texts = [s for _, s in lines]
    gpus: list = []
    switches: list = []
    if "GPUs:" in texts or any("NvLink Link Status" in s for s in texts):
        gpus, switches = _link_status(lines, problems)
    elif any("NVLINK Error Counts" in s for s in texts):
        gpus = _errors_tree(lines, problems, not_run)
    elif not_run:
        problems += [f"line {n}: unknown line {s[:80]!r}" for n, s in lines]
    else:
        raise ParseError(
            "not dcgmi nvlink output (expected 'dcgmi nvlink -s' with 'GPUs:' / 'gpuId N:', "
            "'dcgmi nvlink -e -g N' with an 'NVLINK Error Counts' box, or its -j JSON); got "
            f"{stripped_text[:60]!r}"
        )
    return NvlinkErrorReport(
        tuple(gpus),
        tuple(dict.fromkeys(problems[:_MAX_PROBLEMS])),
        tuple(dict.fromkeys(not_run)),
        tuple(switches),
    )
