"""Run a bench campaign as its users do (``python -m bench.<name> ...`` from the repository's
root) and hand back what it printed: the campaign tests' one way in."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_campaign(name: str, *args: str, timeout: float = 240) -> str:
    """``bench.<name>``'s standard output; an AssertionError with its output and the end of its
    errors when it exits non-zero (a broken promise, or a crash)."""
    run = subprocess.run(
        [sys.executable, "-m", f"bench.{name}", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr[-3000:]
    return run.stdout
