"""Reading one value of nccl-tests output, the same way in the text table and the JSON.

Numbers (``N/A``, ``nan`` and ``inf`` are ``None``), collective names, GPU models and the
correctness column. The correctness rules:

* The old float ``error`` column (text only) is the largest absolute deviation, not a count. It is
  mapped to ``0`` wrong when it is within the tolerance nccl-tests itself applies for the data
  type (``deltaMaxValue`` in ``src/common.cu``: 16-bit floats 5e-2, float 1e-5, double 1e-12,
  integer types exact; unknown types 1e-5) and to ``1`` ("at least one wrong element") when it
  exceeds it or carries the ``*`` failure mark that later versions print. ``N/A`` (``-c 0``) is
  ``None``.
* The ``#wrong`` column is a count; a trailing ``*`` failure mark is ignored.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from typing import Any

__all__ = [
    "gpu_model_from_device_name",
    "normalise_collective",
    "single_model",
    "to_float",
    "to_int",
    "wrong_from_count",
    "wrong_from_error",
]

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


def wrong_from_error(token: str, dtype: str | None) -> int | None:
    """Map an old float ``error`` cell to a wrong count: 0 within tolerance, 1 beyond it."""
    text = token.strip()
    if text.upper() == "N/A":
        return None
    flagged = text.endswith("*")
    value = to_float(text.rstrip("*"))
    if value is None:
        return None
    if flagged:
        return 1
    key = (dtype or "").lower()
    if key in _INTEGER_TYPES:
        return 0 if value == 0 else 1
    tolerance = _ERROR_TOLERANCE.get(key, _DEFAULT_ERROR_TOLERANCE)
    return 0 if abs(value) <= tolerance else 1


def wrong_from_count(token: str) -> int | None:
    """A ``#wrong`` cell as a count; None for ``N/A``."""
    text = token.strip()
    if text.upper() == "N/A":
        return None
    value = to_float(text.rstrip("*"))
    if value is None:
        return None
    return int(round(value))
