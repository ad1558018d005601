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
import os
import re
from collections.abc import Callable
from typing import Any

from gpufleet.domain.inputs import ECHO_LIMIT as SHOWN  # noqa: F401 (re-exported)
from gpufleet.domain.inputs import shown  # the one echo of a refused value
from gpufleet.errors import GpufleetError

# Airflow's REST API, as the verbs that call it (trigger, approve) reach it
AIRFLOW_URL = "http://localhost:8080"
AIRFLOW_USER = "admin"
HOUR_S = 3600.0


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


def add_airflow_args(parser: Any, user_help: str) -> None:
    """The options of a verb that calls Airflow's REST API: ``--url``, ``--user``,
    ``--password`` (prefer the environment) and ``--http-timeout``."""
    parser.add_argument(
        "--url",
        default=os.environ.get("GPUFLEET_AIRFLOW_URL") or AIRFLOW_URL,
        help=(
            f"Airflow api-server base URL (env GPUFLEET_AIRFLOW_URL, default {AIRFLOW_URL}); "
            "user:password@ in it is ignored: use --user and GPUFLEET_AIRFLOW_PASSWORD"
        ),
    )
    parser.add_argument(
        "--user",
        default=os.environ.get("GPUFLEET_AIRFLOW_USER") or AIRFLOW_USER,
        help=f"{user_help} (env GPUFLEET_AIRFLOW_USER, default {AIRFLOW_USER})",
    )
    parser.add_argument(
        "--password",
        default=None,
        help="Airflow password (prefer env GPUFLEET_AIRFLOW_PASSWORD: arguments show in ps)",
    )
    parser.add_argument(
        "--http-timeout",
        type=bounded_float(0, HOUR_S, "a number of seconds"),
        default=30.0,
        metavar="S",
        help="seconds to wait for each API answer. Default 30",
    )


def airflow_password(args: argparse.Namespace) -> str:
    """``--password``, else ``GPUFLEET_AIRFLOW_PASSWORD``; none is a clear error before any
    HTTP call."""
    password = (
        args.password if args.password is not None else os.environ.get("GPUFLEET_AIRFLOW_PASSWORD")
    )
    if not password:
        raise GpufleetError(
            f"no password for Airflow user {args.user!r}: "
            "set GPUFLEET_AIRFLOW_PASSWORD or pass --password"
        )
    return password
