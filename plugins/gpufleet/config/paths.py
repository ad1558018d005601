"""Where gpufleet finds its data and keeps its state. Pure: environment lookups only."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from gpufleet.errors import CatalogError

# plugins/gpufleet/config/paths.py -> repository (or image) root holding include/
_ROOT = Path(__file__).resolve().parents[3]


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


def catalog_files(directory: Path | None = None) -> list[Path]:
    """The catalog's YAML files, sorted; the folder must exist."""
    directory = Path(directory) if directory else catalog_dir()
    if not directory.is_dir():
        raise CatalogError(f"fleet catalog folder {directory} does not exist")
    return sorted(p for p in directory.iterdir() if p.suffix in (".yaml", ".yml"))


def fingerprint(files: list[Path]) -> list[list[Any]]:
    """Path, size and mtime of each catalog file: what a cached catalog is valid for."""
    out = []
    for path in files:
        st = path.stat()
        out.append([str(path), st.st_size, st.st_mtime_ns])
    return out
