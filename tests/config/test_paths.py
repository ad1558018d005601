"""Which fleet state a command reads: the project's own when run inside a set-up checkout."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
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


def test_make_setup_creates_the_ledger_through_gpufleet_ledger_init(tmp_path):
    """The one step that creates a ledger runs in ``make setup`` (once: a stamp), after
    Airflow's metadata DB (stamped done here, as another target's work) and says what it did;
    with nothing configured, the ledger is the home's default file."""
    import os

    home = tmp_path / "home"
    home.mkdir()
    (home / ".migrated").touch()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUFLEET_", "AIRFLOW"))}
    make = ["make", "--no-print-directory", "setup", f"AIRFLOW_HOME={home}"]
    # the venv and the metadata DB are other targets' work: assumed done (`make -o`)
    make += ["-o", str(ROOT / ".venv" / ".installed"), "-o", str(home / ".migrated")]
    done = subprocess.run(make, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    ledger = home / "gpufleet" / "ledger.db"
    assert "gpufleet ledger init: created the ledger at schema version" in done.stdout
    assert f"sqlite:///{ledger}" in done.stdout and ledger.exists()
    assert (home / ".ledger-init").exists()
