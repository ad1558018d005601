"""Reading one value of nccl-tests output, the same way in the text table and the JSON.

Design: docs/design/parsers.md.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from typing import Any

__all__ = [
    "clip",
    "count",
    "figure",
    "gpu_model_from_device_name",
    "normalise_collective",
    "single_model",
    "to_float",
    "to_int",
    "wrong_from_count",
    "wrong_from_error",
]

Read = tuple[Any, str | None]  # (value or None, reason it is refused or None)
_WHOLE = re.compile(r"^[-+]?\d+$")
_MAX_DIGITS = 30
_COUNT_LIMIT = 2**64

_VENDOR_PREFIXES = ("NVIDIA ", "Tesla ", "Quadro ", "AMD ")
_MODEL_TOKEN = re.compile(r"^[A-Z]{1,3}\d{1,4}[A-Za-z]{0,3}$")


def gpu_model_from_device_name(name: str | None) -> str | None:
    """``"NVIDIA H100 80GB HBM3"`` -> ``"H100"``; ``"NVIDIA A100-SXM4-40GB"`` -> ``"A100"``.

    A name whose first word is not a model code (``"NVIDIA GeForce RTX 4090"``) is returned
    without the vendor prefix (``"GeForce RTX 4090"``) rather than guessed at.
    """
    if not name:
        return None
    text = name.strip()
    changed = True
    while changed:
        changed = False
        for prefix in _VENDOR_PREFIXES:
            if text.startswith(prefix):
                text = text[len(prefix) :].strip()
                changed = True
    if not text:
        return None
    first = text.split()[0].split("-")[0]
    if _MODEL_TOKEN.match(first):
        return first
    return text


def to_float(token: Any) -> float | None:
    """A finite float, or None for ``N/A``, ``nan``, ``inf``, empty or junk."""
    if token is None or isinstance(token, bool):
        return None
    try:
        value = float(token)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def to_int(token: Any) -> int | None:
    """An int, from an int or from text holding a whole number (``"8"``, ``"8.0"``); else None."""
    if token is None or isinstance(token, bool):
        return None
    if isinstance(token, int):
        return token
    text = str(token).strip()
    try:
        return int(text)
    except ValueError:
        value = to_float(text)
        if value is None or value != int(value):
            return None
        return int(value)


def _show(token: Any, limit: int = 32) -> str:
    text = token.strip() if isinstance(token, str) else repr(token)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def clip(text: str, limit: int = 160) -> str:
    """A line as shown in a reason: stripped, at most ``limit`` characters."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def figure(token: Any, name: str) -> Read:
    """A finite, non-negative number (time, bandwidth, size); see the module docstring."""
    if token is None:
        return None, None
    if isinstance(token, str) and token.strip().upper() == "N/A":
        return None, None
    if isinstance(token, bool):
        return None, f"{name} {_show(token)} is not a number"
    if isinstance(token, str) and _WHOLE.match(token.strip()):
        text = token.strip()
        if len(text.lstrip("+-")) > _MAX_DIGITS:
            return None, f"{name} has {len(text.lstrip('+-'))} digits"
        token = int(text)
    if isinstance(token, int):
        return (token, None) if token >= 0 else (None, f"{name} {token} is negative")
    try:
        value = float(token)
    except (TypeError, ValueError):
        return None, f"{name} {_show(token)} is not a number"
    except OverflowError:
        return None, f"{name} {_show(token)} is not finite"
    if not math.isfinite(value):
        return None, f"{name} {_show(token)} is not finite"
    if value < 0:
        return None, f"{name} {_show(token)} is negative"
    return value, None


def count(token: Any, name: str) -> Read:
    """A whole, non-negative number below 2**64 (size, element count, ``#wrong``: nccl-tests
    keeps them in 64-bit integers); never rounded."""
    value, reason = figure(token, name)
    if value is None:
        return value, reason
    if not isinstance(value, int):
        if value != int(value):
            return None, f"{name} {_show(token)} is not a whole number"
        value = int(value)
    if value >= _COUNT_LIMIT:
        return None, f"{name} {_show(token)} is beyond a 64-bit count"
    return value, None


def normalise_collective(name: str | None) -> str | None:
    """``"./build/all_reduce_perf_mpi"`` -> ``"all_reduce_perf"``."""
    if not name:
        return None
    base = name.strip().strip("\"'").rsplit("/", 1)[-1]
    if base.endswith("_mpi"):
        base = base[: -len("_mpi")]
    return base or None


def single_model(models: Iterable[str | None], notes: list[str]) -> str | None:
    """The one GPU model of a run; None (and a note) when devices disagree."""
    distinct = sorted({m for m in models if m})
    if len(distinct) == 1:
        return distinct[0]
    if len(distinct) > 1:
        notes.append("mixed GPU models: " + ", ".join(distinct))
    return None


# Tolerances nccl-tests applies to the old float "error" column (deltaMaxValue in common.cu).
_ERROR_TOLERANCE = {
    "half": 5e-2,
    "float16": 5e-2,
    "fp16": 5e-2,
    "bfloat16": 5e-2,
    "bf16": 5e-2,
    "float": 1e-5,
    "float32": 1e-5,
    "fp32": 1e-5,
    "double": 1e-12,
    "float64": 1e-12,
    "fp64": 1e-12,
}
_INTEGER_TYPES = {"int8", "uint8", "char", "int", "int32", "uint32", "int64", "uint64"}
_DEFAULT_ERROR_TOLERANCE = 1e-5


def wrong_from_error(token: str, dtype: str | None) -> Read:
    """Map an old float ``error`` cell to a wrong count: 0 within tolerance, 1 beyond it."""
    text = token.strip()
    if text.upper() == "N/A":
        return None, None
    flagged = text.endswith("*")
    value, reason = figure(text.rstrip("*"), "error")
    if value is None:
        return None, reason or f"error {_show(token)} is not a number"
    if flagged:
        return 1, None
    key = (dtype or "").lower()
    if key in _INTEGER_TYPES:
        return (0 if value == 0 else 1), None
    tolerance = _ERROR_TOLERANCE.get(key, _DEFAULT_ERROR_TOLERANCE)
    return (0 if value <= tolerance else 1), None


def wrong_from_count(token: Any, name: str = "#wrong") -> Read:
    """A ``#wrong`` cell (or JSON ``nwrong``) as a count; ``None`` for ``N/A`` and ``null``."""
    if isinstance(token, str):
        token = token.strip().rstrip("*")
    return count(token, name)
