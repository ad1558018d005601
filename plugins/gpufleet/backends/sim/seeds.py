"""The simulated fleet's determinism: every "random" choice the sim makes about a node, a run
or a pod (which GPU a fault lands on, a GPU's UUID and serial, a run's jitter, a pod's name
suffix) is seeded by a hash of what it is about, so the same inputs print the same outputs in
every process and every run."""

from __future__ import annotations

import hashlib
from typing import Any


def seed(*parts: Any) -> int:
    """A stable 48-bit integer for ``parts`` (the first 12 hex digits of the SHA-256 of their
    ``str`` joined by ``|``): the same parts give the same seed in every process."""
    return int(hashlib.sha256("|".join(map(str, parts)).encode()).hexdigest()[:12], 16)
