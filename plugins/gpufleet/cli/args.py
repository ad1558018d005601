"""Argument types every subcommand shares: numbers that must be finite and within bounds.

``float("nan")`` and ``float("inf")`` parse; a timeout or an age that is not finite would
make a wait last forever or a freshness check never refuse, so they are refused here, with
one line naming the argument (argparse adds it).
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable


def bounded_float(
    low: float, high: float, what: str = "a number", low_inclusive: bool = False
) -> Callable[[str], float]:
    """A finite float in (low, high] (or [low, high] with ``low_inclusive``)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
        too_low = value < low if low_inclusive else value <= low
        if too_low or value > high:
            bracket = "[" if low_inclusive else "("
            raise argparse.ArgumentTypeError(f"{text!r} is outside {bracket}{low:g}, {high:g}]")
        return value

    return parse


def bounded_int(low: int, high: int, what: str = "a whole number") -> Callable[[str], int]:
    """An integer in [low, high]."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{text!r} is outside [{low}, {high}]")
        return value

    return parse
