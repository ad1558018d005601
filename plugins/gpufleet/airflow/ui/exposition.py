"""The Prometheus text exposition format, written as ``prometheus_client.generate_latest``
writes it (HELP and TYPE lines, labels sorted by name and escaped, numbers as Go prints them;
``tests/services/views/test_metrics.py`` holds the two byte for byte), without building a sample
object per value: ``/metrics`` over 2,000 pools writes some 30,000 samples (``metrics.py``)."""

from __future__ import annotations

import math
from bisect import bisect_left
from typing import Any


def _number(value: Any) -> float | None:
    """A finite number, else None (ledger ``details`` are read defensively)."""
    if type(value) is float or type(value) is int:  # the common case, decided at once
        return float(value) if math.isfinite(value) else None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


class Exposition:
    """Gauge families in the text exposition format: ``gauge`` adds a sample (a value that is
    not a finite number is left out) with its labels as ``Labels`` renders them, ``text`` writes
    them, families in the order first seen, samples in the order added."""

    def __init__(self) -> None:
        from prometheus_client.utils import floatToGoString

        self.families: dict[str, tuple[str, list[str]]] = {}  # name -> help text, lines
        self._numbers: dict[float, str] = {}
        self._float = floatToGoString

    def gauge(self, name: str, help_text: str, labels: str, value: Any) -> None:
        if value is None:  # the common absent figure
            return
        number = _number(value)
        if number is None:
            return
        family = self.families.get(name)
        if family is None:
            family = self.families[name] = (help_text, [])
        text = self._numbers.get(number) if number else None
        if text is None:
            text = self._go(number)
        family[1].append(f"{name}{labels} {text}\n")

    def number_text(self, value: float) -> str:
        """A finite float as the format writes it (``floatToGoString``)."""
        text = self._numbers.get(value) if value else None
        return text if text is not None else self._go(value)

    def _go(self, number: float) -> str:
        """``prometheus_client.utils.floatToGoString`` of ``number``, each value once."""
        if number == 0:  # 0.0 and -0.0 are one key: say which
            return "-0.0" if math.copysign(1.0, number) < 0 else "0.0"
        text = self._numbers[number] = self._float(number)
        return text

    def extend(self, families: dict[str, tuple[str, list[str]]]) -> None:
        """Add another exposition's ``families`` (their samples after this one's own)."""
        for name, (help_text, lines) in families.items():
            family = self.families.get(name)
            if family is None:
                family = self.families[name] = (help_text, [])
            family[1].extend(lines)

    def text(self) -> bytes:
        out = []
        for name, (help_text, lines) in self.families.items():
            doc = help_text.replace("\\", r"\\").replace("\n", r"\n")
            out.append(f"# HELP {name} {doc}\n# TYPE {name} gauge\n")
            out.extend(lines)
        return "".join(out).encode("utf-8")


def _escape(value: str) -> str:
    """A label value as the format quotes it: backslash, line feed and double quote escaped."""
    if "\\" in value or "\n" in value or '"' in value:
        return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")
    return value


class Labels:
    """Labels many samples share (a pool's cluster and pool), rendered once: ``text`` is
    ``{name="value",...}`` sorted by name with each value escaped (empty without labels), and
    ``plus`` the same with one more label in its sorted place."""

    def __init__(self, **pairs: str) -> None:
        self.names = sorted(pairs)
        self.parts = [f'{name}="{_escape(pairs[name])}"' for name in self.names]
        self.text = "{" + ",".join(self.parts) + "}" if pairs else ""

    def plus(self, name: str, value: str) -> str:
        at = bisect_left(self.names, name)
        pair = f'{name}="{_escape(value)}"'
        return "{" + ",".join([*self.parts[:at], pair, *self.parts[at:]]) + "}"
