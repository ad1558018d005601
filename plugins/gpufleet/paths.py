"""Where gpufleet finds its data and keeps its state. Pure: environment lookups only."""

from __future__ import annotations

import os
from pathlib import Path

# plugins/gpufleet/paths.py -> repository (or image) root holding include/
_ROOT = Path(__file__).resolve().parents[2]


def include_dir() -> Path:
    """The include/ folder: fleet catalog, baselines and manifest templates."""
    return Path(os.environ.get("GPUFLEET_INCLUDE_DIR") or _ROOT / "include")


def catalog_dir() -> Path:
    """The fleet catalog folder: ``include/fleet`` unless ``GPUFLEET_CATALOG_DIR`` is set."""
    return Path(os.environ.get("GPUFLEET_CATALOG_DIR") or include_dir() / "fleet")


def state_dir() -> Path:
    """Local state (sim fleet database, default ledger, caches): ``$AIRFLOW_HOME/gpufleet``."""
    explicit = os.environ.get("GPUFLEET_STATE_DIR")
    if explicit:
        return Path(explicit)
    home = os.environ.get("AIRFLOW_HOME") or str(Path.home() / "airflow")
    return Path(home) / "gpufleet"
