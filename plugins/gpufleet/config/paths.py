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
    """Local state (sim fleet database, default ledger, caches): ``$AIRFLOW_HOME/gpufleet``.

    ``GPUFLEET_STATE_DIR`` wins. Without ``AIRFLOW_HOME``, a command run inside a gpufleet
    checkout that ``make`` has set up (it has ``.airflow/``) uses that checkout's state, the
    one ``make run`` wrote; anywhere else Airflow's own default, ``~/airflow``."""
    explicit = os.environ.get("GPUFLEET_STATE_DIR")
    if explicit:
        return Path(explicit)
    return Path(airflow_home()) / "gpufleet"


def airflow_home() -> Path:
    """``AIRFLOW_HOME``; else the checkout's ``.airflow/`` when the working directory is inside
    a set-up checkout; else ``~/airflow`` (Airflow's default)."""
    home = os.environ.get("AIRFLOW_HOME")
    if home:
        return Path(home)
    checkout = _ROOT / ".airflow"
    try:
        inside = Path.cwd().resolve().is_relative_to(_ROOT)
    except OSError:  # the working directory was removed
        inside = False
    if inside and checkout.is_dir():
        return checkout
    return Path.home() / "airflow"


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
        try:
            st = path.stat()
        except OSError as exc:
            raise CatalogError(
                f"{path}: cannot read: {exc.strerror} (a broken symlink in the catalog folder?)"
            ) from None
        out.append([str(path), st.st_size, st.st_mtime_ns])
    return out
