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
    """A cloud or cluster call failed in a way that a retry may fix (throttling, 5xx)."""


class ParseError(GpufleetError):
    """An input holds nothing the parser recognises."""
