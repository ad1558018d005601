"""``dcgmi diag`` output in any of its forms, told apart and handed to the parser of that form:
the ``-j`` JSON (``dcgm.parse_dcgm_diag_json``), the text table (``dcgm_text``), or only the
run errors ``dcgmi`` printed instead. The forms' parsers share their model in ``dcgm``; this
module, which imports both, is the one entry point (``parse_dcgm_diag``)."""

from __future__ import annotations

import json
import re

from gpufleet.errors import ParseError
from gpufleet.parsing.health.dcgm import BANNER, DcgmDiagResult, clip
from gpufleet.parsing.health.dcgm_errors import run_errors, run_level
from gpufleet.parsing.health.dcgm_json import looks_like_json, parse_dcgm_diag_json
from gpufleet.parsing.health.dcgm_text import parse_dcgm_diag_text

__all__ = ["parse_dcgm_diag"]

_TABLE_LINE = re.compile(r"^\s*[|+]", re.MULTILINE)


def parse_dcgm_diag(text: str) -> DcgmDiagResult:
    """``dcgmi diag`` output in any form: JSON (``-j``) when it holds a diagnostic document (or
    the start of one), else the text table, else the run errors dcgmi printed instead."""
    if isinstance(text, bytes | bytearray):
        text = text.decode("utf-8", errors="replace")
    if looks_like_json(text):
        return parse_dcgm_diag_json(text)
    if _TABLE_LINE.search(text) or BANNER in text:
        return parse_dcgm_diag_text(text)
    problems: list[str] = []
    errors = run_errors(text, problems)
    if errors:
        level = run_level(text, problems)
        return DcgmDiagResult(
            source="text",
            dcgm_version=None,
            driver_version=None,
            tests=(),
            problems=tuple(problems),
            level=level,
            not_run=tuple(dict.fromkeys(errors)),
        )
    seen = next((line.strip() for line in text.splitlines() if line.strip()), "")
    raise ParseError(
        "no dcgmi diag output found (expected '-j' JSON, the '| Diagnostic | Result |' table or"
        f" a dcgmi 'Error: ...' line); it begins {json.dumps(clip(seen, 80))}"
        if seen
        else "no dcgmi diag output found: the text is empty"
    )
