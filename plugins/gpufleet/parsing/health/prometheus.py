"""Read Prometheus' text exposition format (what ``/metrics`` endpoints serve) into samples.

A function over the text handed in: no I/O. Per line: ``# HELP`` / ``# TYPE`` and other
comments, or one sample ``name{label="value",...} value [timestamp]``: labels may be spaced
after their commas (``{gpu="0", UUID="..."}``, as dcgm-exporter's README shows them), a label
value escapes ``\\\\``, ``\\"`` and ``\\n``; the value is a float as Prometheus writes it
(``1``, ``35.686000``, ``1e+06``, ``NaN``, ``+Inf``). A line that is none of these is returned
as unreadable, with its number, for the caller to refuse.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import dataclass

__all__ = ["Sample", "read_samples"]

_SAMPLE = re.compile(
    r"^(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)\s*(?:\{(?P<labels>.*)\})?\s+(?P<value>\S+)"
    r"(?:\s+(?P<ts>-?\d{1,20}))?\s*$"
)
# a value's characters as an unrolled loop (runs of plain characters between escapes): the
# same strings as ``(?:[^"\\]|\\.)*``, without a branch per character
_LABEL = re.compile(
    r'\s*(?P<key>[A-Za-z_][A-Za-z0-9_]*)\s*=\s*"(?P<value>[^"\\]*(?:\\.[^"\\]*)*)"\s*'
)
_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_ESCAPE = re.compile(r"\\.")
_ESCAPES = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}
_WORDS = {"nan": math.nan, "+inf": math.inf, "inf": math.inf, "-inf": -math.inf}


@dataclass(frozen=True, slots=True)
class Sample:
    """One sample line: its metric name, labels, value (a float: NaN and infinities as
    written) and line number."""

    name: str
    labels: dict[str, str]
    value: float
    line: int


def _labels(text: str) -> dict[str, str] | None:
    """``key="value", ...`` as a dict; None when it is not that."""
    labels: dict[str, str] = {}
    position = 0
    while position < len(text):
        found = _LABEL.match(text, position)
        if found is None:
            return None
        value = found["value"]
        if "\\" in value:  # escapes are rare: unescape only a value that has one
            value = _ESCAPE.sub(lambda m: _ESCAPES.get(m.group(), m.group()), value)
        if found["key"] in labels:
            return None
        labels[found["key"]] = value
        position = found.end()
        if position < len(text):
            if text[position] != ",":
                return None
            position += 1
    return labels


def _value(text: str) -> float | None:
    word = text.lower()
    if word in _WORDS:
        return _WORDS[word]
    if not _NUMBER.fullmatch(text):
        return None
    return float(text)


def read_samples(text: str) -> Iterator[Sample | int]:
    """Each sample of ``text`` in order; the number of a line that is neither a sample, a
    comment nor blank."""
    # lines end at "\n" only (the format's; ``splitlines`` would also break a label value at
    # \x1c-\x1e, \x85 or \u2028, which the format leaves as they are)
    for number, line in enumerate(text.split("\n"), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        found = _SAMPLE.match(stripped)
        if found is None:
            yield number
            continue
        labels = _labels(found["labels"] or "")
        value = _value(found["value"])
        if labels is None or value is None:
            yield number
            continue
        yield Sample(found["name"], labels, value, number)
