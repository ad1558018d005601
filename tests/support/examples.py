"""How many examples a property test tries: its quick count in `make test`, its thorough count
(the figures docs/reliability.md quotes, and what bench and a reviewer run) with
``GPUFLEET_HYPOTHESIS_PROFILE=thorough``.

A test takes a quick count only when mutation says it may: each rule the test protects was
broken on a scratch copy, and the quick count failed on every break the thorough count found,
under random seeds (``--hypothesis-seed``) and derandomized (``CI=true``). The node lifecycle
machine passed (quick 200 of 400). The transition machine (600) and the generated ledgers
(1,000) did not: at half or a quarter of their counts they missed breaks the full counts find,
so they keep the full counts everywhere."""

from __future__ import annotations

import os

PROFILE_VAR = "GPUFLEET_HYPOTHESIS_PROFILE"
PROFILES = ("quick", "thorough")


def profile() -> str:
    """``quick`` (the default) or ``thorough``; anything else is a mistake, said so."""
    name = os.environ.get(PROFILE_VAR, "").strip().lower() or "quick"
    if name not in PROFILES:
        raise ValueError(f"{PROFILE_VAR}={name!r}: expected one of {', '.join(PROFILES)}")
    return name


def examples(*, thorough: int, quick: int) -> int:
    """``max_examples`` for the current profile."""
    return thorough if profile() == "thorough" else quick
