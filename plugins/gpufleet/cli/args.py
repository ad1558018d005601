"""Argument types every subcommand shares: numbers that must be finite and within bounds, and
names that must have Kubernetes name syntax.

``float("nan")`` and ``float("inf")`` parse; a timeout or an age that is not finite would
make a wait last forever or a freshness check never refuse, so they are refused here, with
one line naming the argument (argparse adds it). What the user typed is quoted back at most
``SHOWN`` characters long, so a pasted megabyte stays a one-line error.
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable

from gpufleet.domain.inputs import ECHO_LIMIT as SHOWN  # noqa: F401 (re-exported)
from gpufleet.domain.inputs import shown  # the one echo of a refused value


def bounded_float(
    low: float, high: float, what: str = "a number", low_inclusive: bool = False
) -> Callable[[str], float]:
    """A finite float in (low, high] (or [low, high] with ``low_inclusive``)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{shown(text)} is not {what}") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{shown(text)} is not a finite number")
        too_low = value < low if low_inclusive else value <= low
        if too_low or value > high:
            bracket = "[" if low_inclusive else "("
            raise argparse.ArgumentTypeError(
                f"{shown(text)} is outside {bracket}{low:g}, {high:g}]"
            )
        return value

    return parse


def bounded_int(low: int, high: int, what: str = "a whole number") -> Callable[[str], int]:
    """An integer in [low, high]."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:  # also a number of more than 4,300 digits
            raise argparse.ArgumentTypeError(f"{shown(text)} is not {what}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{shown(text)} is outside [{low}, {high}]")
        return value

    return parse


def name(pattern: re.Pattern[str], max_length: int, what: str) -> Callable[[str], str]:
    """A string matching ``pattern`` of at most ``max_length`` characters (``what`` says what
    it must be, for the error)."""

    def parse(text: str) -> str:
        if len(text) > max_length or not pattern.fullmatch(text):
            raise argparse.ArgumentTypeError(f"{shown(text)} is not {what}")
        return text

    return parse
