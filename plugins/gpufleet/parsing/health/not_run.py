"""A check, or a part of one, that did not run: what the health parsers report beside what they
read, so that no caller can take an output that says nothing for one that says "healthy".

A function-free module of types: no I/O. Every health parser's result carries ``not_run``, a
tuple of :class:`NotRun`, each naming what did not run (the tool, a test, a section, a GPU's
counters) and why, in the tool's own words where it gave some (DCGM's ``DCGM_ST_*`` return,
NVML's message, a section missing from a cut-off output, a timeout). The domain
(``gpufleet.domain.health``) reads it: a ``could_not_run`` is never healthy, never a burn-in and
never a hardware failure.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["NotRun"]


@dataclass(frozen=True, slots=True)
class NotRun:
    """What did not run (``what``: ``"dcgmi diag"``, ``"dcgmi diag test 'pcie'"``,
    ``"nvidia-smi ECC of GPU 00000000:3B:00.0"``), why (``why``: the tool's words or what is
    missing), and the tool's status code when it named one (``code``: a ``DCGM_ST_*`` name such
    as ``DCGM_ST_IN_USE``, which the health round retries within a bound)."""

    what: str
    why: str
    code: str | None = None

    def __str__(self) -> str:
        code = f" ({self.code})" if self.code else ""
        return f"{self.what}: {self.why}{code}"
