"""Load the fleet catalog (``include/fleet/*.yaml``) into the domain's types.

A bad catalog fails at load with the file, the path inside it and what is wrong, e.g.::

    include/fleet/sim.yaml: regions[0].clusters[0].node_pools[1].reservation:
    reservation 'res-x' is not declared in region 'sim-us-central1' (declared: res-a3u-1)

The types and the rules that tie their fields together live in ``gpufleet.domain.fleet``; this
module reads files (YAML), names the file and path of a problem, and keeps a loaded catalog per
process.

Every Airflow task runs in a new process, so each would read the whole catalog's YAML again:
0.6 s at 2,000 pools, most of it PyYAML building Python objects. A file's data, once read, is
kept as JSON in the state folder (``catalog-data/<sha256 of the file>.json``), which loads about
50 times faster; the file's content names it, so an edit is never read stale.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from gpufleet.config.paths import catalog_dir, catalog_files, fingerprint, state_dir
from gpufleet.domain.fleet import (
    Catalog,
    CatalogFile,
    Cluster,
    Filesystem,
    GpuModel,
    NodePool,
    PoolRef,
    Region,
)
from gpufleet.domain.fleet_rules import region_problems
from gpufleet.domain.remediation import RemediationPolicy
from gpufleet.errors import CatalogError

__all__ = [
    "Catalog",
    "Cluster",
    "Filesystem",
    "NodePool",
    "PoolRef",
    "Region",
    "load_catalog",
    "catalog_problems",
    "check_catalog_files",
    "parse_catalog_file",
]

try:  # the C loader is ~10x faster on large catalogs
    _BaseLoader: Any = yaml.CSafeLoader
except AttributeError:  # pragma: no cover - libyaml missing
    _BaseLoader = yaml.SafeLoader


class _UniqueKeyLoader(_BaseLoader):
    """Safe YAML that refuses a mapping with the same key twice (YAML keeps the last one
    silently, so a pasted block would override a pool's size without anyone noticing)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                duplicate = key in seen
            except TypeError:  # an unhashable key: let the base constructor refuse it
                break
            if duplicate:
                raise yaml.constructor.ConstructorError(
                    "while constructing a mapping",
                    node.start_mark,
                    f"found duplicate key {key!r}",
                    key_node.start_mark,
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _loc(parts: tuple[Any, ...] | list[Any]) -> str:
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _raise(path: Path, where: str, message: str) -> None:
    raise CatalogError(f"{path}: {where}: {message}" if where else f"{path}: {message}")


def _pydantic_problem(err: Any) -> tuple[str, str]:
    msg = err["msg"].removeprefix("Value error, ")
    if err["type"] == "literal_error":
        msg = f"{err.get('input')!r}: {msg}"
    elif err["type"] == "extra_forbidden":
        msg = "unknown field (check the spelling)"
    return _loc(err["loc"]), msg


DATA_CACHE = "catalog-data"  # in the state folder: each catalog file's data read once, as JSON
_DATA_KEEP = 32  # cached files kept (older ones are a catalog's past edits)


def _read_file(path: Path) -> Any:
    try:
        raw = path.read_bytes()
        text = raw.decode("utf-8")
    except FileNotFoundError:
        what = "a broken symlink" if path.is_symlink() else "no such file"
        raise CatalogError(f"{path}: cannot read: {what}") from None
    except OSError as exc:
        raise CatalogError(f"{path}: cannot read: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise CatalogError(
            f"{path}: not UTF-8 text (byte {exc.start}): save the catalog as UTF-8"
        ) from None
    cache = state_dir() / DATA_CACHE / f"{hashlib.sha256(raw).hexdigest()}.json"
    try:
        return json.loads(cache.read_bytes())
    except (OSError, ValueError, RecursionError):  # not cached yet, or unreadable: the YAML
        pass
    data = _parse_yaml(path, text)
    _keep(cache, data)
    return data


def _keep(cache: Path, data: Any) -> None:
    """Write ``data`` to ``cache`` when JSON gives back exactly the same (YAML's dates, or keys
    that are not strings, would come back changed: such a file is read as YAML every time).
    A state folder that cannot be written only costs the time."""
    try:
        text = json.dumps(data, allow_nan=False)
        if json.loads(text) != data:
            return
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(text)
        tmp.replace(cache)
        kept = sorted(cache.parent.glob("*.json"), key=lambda p: p.stat().st_mtime_ns)
        for old in kept[:-_DATA_KEEP]:
            old.unlink(missing_ok=True)
    except (TypeError, ValueError, RecursionError, OSError):
        return


def _parse_yaml(path: Path, text: str) -> Any:
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        raise CatalogError(f"{path}: not valid YAML: {where}{exc.problem or exc}") from None
    except yaml.YAMLError as exc:
        raise CatalogError(f"{path}: not valid YAML: {' '.join(str(exc).split())}") from None
    except RecursionError:
        raise CatalogError(f"{path}: not valid YAML: nested too deeply") from None
    except ValueError:  # Python refuses to read an integer of more than 4300 digits
        raise CatalogError(f"{path}: not valid YAML: a number too large to read") from None


def catalog_problems(path: Path) -> tuple[list[Region], list[tuple[str, str]]]:
    """Every problem in one catalog file as ``(where, message)`` pairs, and its regions when
    there are none. Unreadable files and invalid YAML raise CatalogError at once."""
    regions, _, problems = _file_problems(path)
    return regions, problems


def _file_problems(path: Path) -> tuple[list[Region], dict[str, GpuModel], list[tuple[str, str]]]:
    """:func:`catalog_problems`, with the file's ``gpu_models`` (empty when it has problems)."""
    return _file_parts(path)[:3]


def _file_parts(
    path: Path,
) -> tuple[list[Region], dict[str, GpuModel], list[tuple[str, str]], RemediationPolicy | None]:
    """:func:`_file_problems`, with the file's ``remediation`` settings (None: unset)."""
    data = _read_file(path)
    if not isinstance(data, dict):
        return [], {}, [("", "expected a mapping with a 'regions' list at the top")], None
    try:
        parsed = CatalogFile.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors()
        # a list whose only item failed also reports "at least 1 item": keep the item's error
        inner = [tuple(e["loc"]) for e in errors]
        errors = [
            e
            for e in errors
            if not (
                e["type"] == "too_short"
                and any(
                    len(o) > len(e["loc"]) and o[: len(e["loc"])] == tuple(e["loc"]) for o in inner
                )
            )
        ]
        return [], {}, [_pydantic_problem(err) for err in errors], None
    problems: list[tuple[str, str]] = []
    for index, region in enumerate(parsed.regions):
        problems += region_problems(region, f"regions[{index}].")
    if problems:
        return [], {}, problems, None
    return list(parsed.regions), dict(parsed.gpu_models), problems, parsed.remediation


def parse_catalog_file(path: Path) -> list[Region]:
    """Parse and check one catalog file; raises CatalogError naming the file and the path of
    the first problem (and how many more there are)."""
    regions, problems = catalog_problems(path)
    if problems:
        where, message = problems[0]
        more = f" (and {len(problems) - 1} more problems)" if len(problems) > 1 else ""
        _raise(path, where, message + more)
    return regions


def _scan_all(
    files: list[Path],
) -> tuple[
    dict[str, Region], dict[str, Path], list[str], dict[str, GpuModel], RemediationPolicy | None
]:
    """Regions by name, the file each came from, every problem found, one line each
    (``file: path: message``), including the cross-file rules (unique region and cluster
    names, a GPU model's settings in one file only), and the ``gpu_models`` of every file."""
    lines: list[str] = []
    models: dict[str, GpuModel] = {}
    model_files: dict[str, Path] = {}
    regions: dict[str, Region] = {}
    sources: dict[str, Path] = {}
    clusters: dict[str, Path] = {}
    remediation: RemediationPolicy | None = None
    remediation_file: Path | None = None
    for path in files:
        try:
            found, file_models, problems, file_remediation = _file_parts(path)
        except CatalogError as exc:
            lines.append(str(exc))
            continue
        if file_remediation is not None:
            if remediation_file is not None:
                lines.append(
                    f"{path}: remediation: the fleet's remediation settings are also set in "
                    f"{remediation_file}: set them in one file"
                )
            else:
                remediation, remediation_file = file_remediation, path
        for name, settings in file_models.items():
            key = name.strip().upper()
            if key in model_files:
                lines.append(
                    f"{path}: gpu_models.{name}: GPU model {name!r} is also set in "
                    f"{model_files[key]}: set each model's dcgmi diag settings in one file"
                )
                continue
            models[key], model_files[key] = settings, path
        lines += [f"{path}: {w}: {m}" if w else f"{path}: {m}" for w, m in problems]
        for index, region in enumerate(found):
            if region.name in regions:
                lines.append(
                    f"{path}: regions[{index}].name: duplicate region {region.name!r} "
                    f"(also in {sources[region.name]})"
                )
                continue
            for c, cluster in enumerate(region.clusters):
                if cluster.name in clusters:
                    lines.append(
                        f"{path}: regions[{index}].clusters[{c}].name: duplicate cluster "
                        f"{cluster.name!r} (also in {clusters[cluster.name]})"
                    )
                clusters.setdefault(cluster.name, path)
            regions[region.name] = region
            sources[region.name] = path
    return regions, sources, lines, models, remediation


def check_catalog_files(files: list[Path]) -> list[str]:
    """Every problem of a set of catalog files, one line each; empty when they are sound."""
    return _scan_all(files)[2]


_loaded: dict[str, tuple[list, Catalog]] = {}


def load_catalog(directory: Path | str | None = None) -> Catalog:
    """Load every ``*.yaml`` in the catalog folder; names must be unique across files.

    Kept per process while the files' sizes and mtimes stay the same (the models are frozen),
    so a task or a gate decision does not re-parse a large catalog."""
    files = catalog_files(Path(directory) if directory else None)
    key = str(Path(directory) if directory else catalog_dir())
    stamp = fingerprint(files)
    hit = _loaded.get(key)
    if hit and hit[0] == stamp:
        return hit[1]
    catalog = _load(files)
    _loaded[key] = (stamp, catalog)
    return catalog


def _load(files: list[Path]) -> Catalog:
    regions, sources, lines, models, remediation = _scan_all(files)
    if lines:
        more = f" (and {len(lines) - 1} more problems)" if len(lines) > 1 else ""
        raise CatalogError(lines[0] + more)
    if not regions:
        raise CatalogError(f"fleet catalog folder {catalog_dir()} holds no regions")
    return Catalog(regions, sources, models, remediation)
