"""Errors a person reads. Each says what was wrong and what to do about it."""

from __future__ import annotations


class GpufleetError(Exception):
    """Base class: the message is shown to the user as is."""


class CatalogError(GpufleetError):
    """The fleet catalog is invalid or does not name what was asked for."""


class LedgerError(GpufleetError):
    """The ledger database cannot be reached or holds something unexpected."""


class BackendError(GpufleetError):
    """A cloud or cluster call failed."""


class TransientBackendError(BackendError):
    """A cloud or cluster call failed in a way that a retry may fix (throttling, 5xx, a dropped
    connection). ``retry_after``: seconds the server asked to wait (its Retry-After), if any."""

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class ParseError(GpufleetError):
    """An input holds nothing the parser recognises."""
