"""Which fleet state a command reads: the project's own when run inside a set-up checkout."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROBE = "from gpufleet.config.paths import state_dir; print(state_dir())"


def _state_dir(cwd: Path, **env: str) -> str:
    base = {"PATH": "/usr/bin:/bin", "HOME": str(cwd), "PYTHONPATH": str(ROOT / "plugins")}
    done = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=cwd, env={**base, **env}, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_inside_the_checkout_without_airflow_home_reads_the_checkouts_state():
    assert (ROOT / ".airflow").is_dir(), "make setup creates .airflow/"
    assert _state_dir(ROOT / "docs") == str(ROOT / ".airflow" / "gpufleet")


def test_outside_the_checkout_airflow_default(tmp_path):
    assert _state_dir(tmp_path) == str(tmp_path / "airflow" / "gpufleet")


def test_explicit_settings_win(tmp_path):
    assert _state_dir(ROOT, AIRFLOW_HOME=str(tmp_path)) == str(tmp_path / "gpufleet")
    assert _state_dir(ROOT, GPUFLEET_STATE_DIR=str(tmp_path / "s")) == str(tmp_path / "s")
