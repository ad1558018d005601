"""What makes a whole run untrustworthy, the same way for the text table and the JSON.

* Refused rows, summed up in one sentence (each :class:`~.results.InvalidRow` keeps its own
  reasons).
* Sizes out of order or repeated. nccl-tests walks the sizes upwards once for every data type,
  reduction and root (``-d all``, ``-o all``, ``-r all``), so the sizes are checked within each
  ``(type, redop, root)``: a size smaller than the one before it, or the same non-zero size
  again, means rows of different runs were mixed or lines were replayed. Size ``0`` may repeat:
  collectives that split a message over the ranks round small sizes down to nothing.

Functions over the rows handed in: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from gpufleet.parsing.nccl_tests.results import InvalidRow, SizeRow

__all__ = ["invalid_rows_problem", "size_order_problems"]

_SHOWN = 3


def invalid_rows_problem(invalid: Sequence[InvalidRow]) -> str | None:
    """One sentence naming the refused rows (the first few with their reasons)."""
    if not invalid:
        return None
    parts = []
    for bad in invalid[:_SHOWN]:
        where = f"size {bad.size_bytes}" if bad.size_bytes is not None else repr(bad.text[:40])
        parts.append(f"{where}: {'; '.join(bad.reasons)}")
    more = f" (and {len(invalid) - _SHOWN} more)" if len(invalid) > _SHOWN else ""
    return (
        f"{len(invalid)} invalid result row(s) refused, not counted as figures: "
        + " | ".join(parts)
        + more
    )


def size_order_problems(rows: Iterable[SizeRow]) -> list[str]:
    """Sizes that go down, or repeat, within one ``(type, redop, root)``."""
    last: dict[tuple[str | None, str | None, int | None], int] = {}
    problems: list[str] = []
    for row in rows:
        key = (row.dtype, row.redop, row.root)
        before = last.get(key)
        if before is not None:
            what = " ".join(str(k) for k in key if k is not None)
            label = f" ({what})" if what else ""
            if row.size_bytes < before:
                problems.append(
                    f"sizes out of order{label}: {row.size_bytes} after {before}: rows of "
                    "different runs mixed?"
                )
            elif row.size_bytes == before and row.size_bytes != 0:
                problems.append(f"size {row.size_bytes} repeated{label}: a row replayed?")
        last[key] = row.size_bytes
        if len(problems) >= _SHOWN:
            break
    return problems
