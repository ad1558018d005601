"""Decode the JSON benchmarks write, refusing what none of them writes.

Python's :mod:`json` accepts ``NaN``/``Infinity`` and numbers that overflow to infinity
(``1e999999``), raises a bare ``ValueError`` for an integer of more than 4,300 digits and a
``RecursionError`` for arrays nested thousands deep. Here each is a :class:`JsonRefused` (a
:class:`~gpufleet.errors.ParseError`) with a one-line reason, so neither a figure nobody measured
nor a traceback comes out. ``inf``/``nan`` written bare (what C's ``printf("%lf")`` makes of
them, as nccl-tests' JSON writer does for an infinite value) is refused the same way.

A function over the text handed in: no I/O.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from gpufleet.errors import ParseError

__all__ = ["MAX_INT_DIGITS", "JsonRefused", "raw_decode"]

MAX_INT_DIGITS = 64  # far beyond any byte count or rate (2**64 has 20 digits)
_BARE_NON_FINITE = re.compile(r"-?(?:inf(?:inity)?|nan)\b", re.IGNORECASE)


class JsonRefused(ParseError):
    """JSON that no benchmark writes (non-finite, absurdly long or absurdly deep)."""


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise JsonRefused(f"JSON number {_clip(text)} is not finite")
    return value


def _int(text: str) -> int:
    digits = len(text.lstrip("-"))
    if digits > MAX_INT_DIGITS:
        raise JsonRefused(f"JSON integer of {digits} digits is no benchmark figure")
    return int(text)


def _constant(name: str) -> Any:
    raise JsonRefused(f"JSON value {name} is not finite (not standard JSON either)")


_DECODER = json.JSONDecoder(parse_float=_float, parse_int=_int, parse_constant=_constant)


def _clip(text: str, limit: int = 24) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def raw_decode(text: str, position: int = 0) -> tuple[Any, int]:
    """Decode one JSON value of ``text`` starting at ``position``; ``(value, end)``.

    Raises :class:`json.JSONDecodeError` for JSON that is merely malformed or cut short (callers
    may repair or skip it) and :class:`JsonRefused` for JSON no benchmark writes.
    """
    try:
        return _DECODER.raw_decode(text, position)
    except RecursionError:
        raise JsonRefused("JSON nested too deeply to be benchmark output") from None
    except json.JSONDecodeError as exc:
        bare = _BARE_NON_FINITE.match(text, exc.pos)
        if bare:
            raise JsonRefused(
                f"JSON holds a non-finite number {bare.group(0)!r} at offset {exc.pos}"
            ) from None
        raise
    except ValueError as exc:  # int() limits: refused before, but keep the promise
        raise JsonRefused(f"JSON number cannot be read ({_clip(str(exc), 80)})") from None


def json_documents(text: str) -> list[dict[str, Any]]:
    """Every JSON object in ``text`` that starts at the beginning of a line (a tool's JSON among
    the warnings it printed before it; several runs appended to one file), read by
    :func:`raw_decode`'s rules."""
    documents: list[dict[str, Any]] = []
    position = 0
    while (brace := text.find("{", position)) >= 0:
        if brace > 0 and text[brace - 1] not in "\n\r":
            position = brace + 1
            continue
        try:
            document, end = raw_decode(text, brace)
        except json.JSONDecodeError:
            position = brace + 1
            continue
        if isinstance(document, dict):
            documents.append(document)
        position = end
    return documents
