"""Catalog names for DAG Params, cheap enough for every DAG parse.

DAG files build Param enums from the catalog at import. Parsing a 2,000-pool catalog takes far
longer than importing a DAG, so the names are cached in a small JSON file keyed on the catalog
files' size and mtime (the dag-processor re-parses every file every 30 s). This module imports
nothing heavy; the pydantic catalog is loaded only when the cache is stale.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from gpufleet.config.paths import catalog_dir, catalog_files, fingerprint, state_dir


class Names(list):
    """A list of catalog names shared, not copied, by every task's copy of the DAG Params.

    Airflow deep-copies Params into each task; with thousands of pools in an enum that copy
    dominates parse time. The names are read-only data, so a copy may be the same object.
    """

    def __deepcopy__(self, memo: dict) -> Names:
        return self


def build_index(catalog) -> dict[str, Any]:
    """The names DAG Params need, from a loaded ``Catalog``."""
    refs = list(catalog.pools())
    return {
        "regions": sorted(catalog.regions),
        "clusters": sorted(catalog.clusters),
        # the sim's clusters: sim_fault_drill exists only where there is one
        "sim_clusters": sorted(
            name for name, (_region, c) in catalog.clusters.items() if c.provider == "sim"
        ),
        "pool_names": sorted({ref.pool.name for ref in refs}),
        "max_nodes": max((ref.pool.nodes for ref in refs), default=1),
        "max_gpus": max((ref.pool.gpu.count for ref in refs), default=1),
    }


# what build_index returns changed (a cache from an older gpufleet lacks a name): rebuilt
INDEX_VERSION = 2


def _shared(index: dict[str, Any]) -> dict[str, Any]:
    return {k: Names(v) if isinstance(v, list) else v for k, v in index.items()}


def catalog_index(directory: Path | str | None = None) -> dict[str, Any]:
    """Names for DAG Params, from a cache that is rebuilt when any catalog file changes."""
    directory = Path(directory) if directory else catalog_dir()
    stamp = fingerprint(catalog_files(directory))
    cache = state_dir() / "catalog-index.json"
    try:
        cached = json.loads(cache.read_text())
        if cached.get("fingerprint") == stamp and cached.get("version") == INDEX_VERSION:
            return _shared(cached["index"])
    except (OSError, ValueError, KeyError):
        pass
    from gpufleet.config.catalog import load_catalog

    index = build_index(load_catalog(directory))
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"fingerprint": stamp, "version": INDEX_VERSION, "index": index}))
        tmp.replace(cache)
    except OSError:  # a read-only deployment still works, just slower
        pass
    return _shared(index)
