"""Without a browser, `make test` skips ONLY the browser tests, and says so at the end.

Runs the browser module in a child pytest with ``GPUFLEET_CHROMIUM`` pointing at nothing (as
on a machine where Chromium is not installed) next to one ordinary test file. Not marked
``browser``: this must run exactly where the browser tests cannot.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_no_chromium_skips_only_the_browser_tests_and_says_why_at_the_end(tmp_path):
    missing = tmp_path / "no-chromium-here"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-n",  # with workers, as `make test` runs: the message comes from the reports
            "2",
            "tests/browser/test_fleet_ui.py",
            "tests/config/test_paths.py",
        ],
        cwd=ROOT,
        env={**os.environ, "GPUFLEET_CHROMIUM": str(missing)},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    out = proc.stdout.strip().splitlines()
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    counts = next(line for line in reversed(out) if " passed" in line)
    assert " skipped" in counts and "failed" not in counts, counts
    assert out[-1].startswith(f"browser tests skipped: GPUFLEET_CHROMIUM={missing} is not an"), out
    assert "Only the 4 browser tests (tests/browser) were skipped for it; every other" in out[-1]
    skipped = [line for line in out if line.startswith("SKIPPED")]
    assert skipped and all("tests/browser/test_fleet_ui.py" in line for line in skipped), skipped
