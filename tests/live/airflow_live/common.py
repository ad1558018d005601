"""What every part of the live Airflow harness shares: where the repo, its plugins and the
virtualenv are, the components' and users' names, the harness's error, and running one
``airflow`` step with its log."""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Mapping
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[3]
PLUGINS_DIR = Path(os.environ.get("GPUFLEET_LIVE_PLUGINS") or REPO_ROOT / "plugins").resolve()
COMPONENTS = ("api-server", "scheduler", "dag-processor", "triggerer")
WORKERS = ("worker-1", "worker-2")  # CeleryExecutor only
DEFAULT_REDIS = "redis://127.0.0.1:6379/0"
USERNAME = "ci"
VIEWER = "viewer"  # a second user with the viewer role, for 403 checks
DEFAULT_PG_DSN = "host=127.0.0.1 port=5432 user=postgres dbname=postgres connect_timeout=2"


class LiveAirflowError(RuntimeError):
    """The harness could not bring Airflow up (the message carries the log tails)."""


def venv_bin() -> Path:
    venv = os.environ.get("GPUFLEET_LIVE_VENV") or str(REPO_ROOT / ".venv")
    return Path(venv) / "bin"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def tail(path: Path, lines: int = 40) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return f"(no {path.name})"
    return "\n".join(text.splitlines()[-lines:])


def run_step(
    name: str, args: list[str], env: Mapping[str, str], log_dir: Path, timeout: float
) -> None:
    log = log_dir / f"{name}.log"
    with log.open("ab") as out:
        result = subprocess.run(
            args, env=dict(env), stdout=out, stderr=subprocess.STDOUT, timeout=timeout, check=False
        )
    if result.returncode != 0:
        raise LiveAirflowError(f"{' '.join(args)} failed ({result.returncode}):\n{tail(log, 60)}")
