"""What a person typed, checked one way by every reader (DAG Params, the launch request, the
catalog, the CLI): numbers that must be finite, and refused values echoed cut short. Pure.

- ``float("nan")`` and ``float("inf")`` parse, and JSON from Python, the CLI or the REST API
  can carry them; every comparison with NaN is false, so a bound (``minimum``, ``le=``, ``<``)
  lets NaN through. ``finite`` refuses them by name.
- A value quoted back in a refusal, a log line or an alert is cut to a few dozen characters
  (``shown``) or a paragraph (``clipped``), saying how long it was: a pasted megabyte stays a
  one-line error.
- A flag is YAML's or JSON's true or false (``Flag``): pydantic's lax reading would take
  ``"yes"``, ``"false"`` or ``1`` for one.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, TypeGuard

from pydantic import BeforeValidator

from gpufleet.errors import GpufleetError

ECHO_LIMIT = 40  # characters of a refused value quoted back
TEXT_LIMIT = 1000  # characters of a free text (an error, a reason) carried into an alert


class InvalidValue(GpufleetError, ValueError):
    """A value a person gave cannot be used; the message names it and says what it must be."""


def shown(value: Any, limit: int = ECHO_LIMIT) -> str:
    """``value`` quoted for a message (``repr``), cut to ``limit`` characters of it."""
    text = value if isinstance(value, str) else repr(value)
    if len(text) <= limit:
        return repr(value) if isinstance(value, str) else text
    return repr(text[:limit]) + f"... ({len(text)} chars)"


def clipped(text: str, limit: int = TEXT_LIMIT) -> str:
    """``text`` as is, or its first ``limit`` characters and how long it was."""
    text = str(text)
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} chars)"


def finite(value: Any, what: str) -> float:
    """``value`` (a number, or a string of one) as a finite float; else InvalidValue naming
    ``what``. Booleans are refused (``True`` is no number of minutes)."""
    if isinstance(value, bool) or value is None:
        raise InvalidValue(f"{what} must be a number, not {shown(value)}")
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        raise InvalidValue(f"{what} must be a number, not {shown(value)}") from None
    if not math.isfinite(number):
        raise InvalidValue(
            f"{what} must be a finite number, not {shown(value)}: give a number within its bounds"
        )
    return number


def whole(value: Any, low: float, high: float = math.inf) -> TypeGuard[int]:
    """Whether ``value`` is a whole number (an int, not a bool) from ``low`` to ``high`` (no
    upper bound by default)."""
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def flag(value: Any) -> bool:
    """``value`` if it is true or false, else ValueError naming it (a catalog or Param flag)."""
    if not isinstance(value, bool):
        raise ValueError(f"true or false, not {shown(value)}")
    return value


Flag = Annotated[bool, BeforeValidator(flag)]  # a pydantic field that takes true or false only
