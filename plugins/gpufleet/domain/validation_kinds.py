"""What a validation row validated (``ValidationKind``): a pool's fabric (NCCL pairs), its
filesystem (fio) or its GPUs' health (dcgmi diag and each node's signals). The ledger's
``gf_validations.kind`` CHECK, the gate, the pages and the report all use this one vocabulary.
A StrEnum: each member equals its string value, so ledger rows and JSON hold the plain strings.
Pure: no I/O.
"""

from __future__ import annotations

from enum import StrEnum


class ValidationKind(StrEnum):
    FABRIC = "fabric"
    STORAGE = "storage"
    HEALTH = "health"
