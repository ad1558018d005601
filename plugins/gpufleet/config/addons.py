"""The pinned cluster controllers (Kueue, JobSet) and where their release manifests come from.

``include/addons/releases.yaml`` pins each controller: version, official release URL, the local
copy's file name, image and the API versions our templates need it to serve. ``release_source``
picks where a controller's manifest is read from, first match wins:

1. an explicit ``source`` (a cluster's own setting: a local path or an ``http(s)://`` URL);
2. ``GPUFLEET_ADDONS_DIR``: a folder holding the copies under their pinned file names (point it
   at ``include/addons`` for tests and offline installs);
3. the official release URL.

``load_release`` reads the manifest (a file, or over HTTP(S) with a timeout) and refuses
anything that is not a list of Kubernetes objects, naming the source and the first bad
document. Reads files and the network; holds no policy.
"""

from __future__ import annotations

import os
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from gpufleet.config.paths import include_dir
from gpufleet.errors import CatalogError, TransientBackendError

ADDONS_DIR_ENV = "GPUFLEET_ADDONS_DIR"
HTTP_TIMEOUT_S = 30.0
MAX_MANIFEST_BYTES = 64 * 1024 * 1024  # the real Kueue manifest is ~3 MB


@dataclass(frozen=True)
class ControllerRelease:
    """One pinned controller release (a row of ``include/addons/releases.yaml``)."""

    name: str
    version: str
    url: str
    file: str
    image: str
    api_versions: tuple[str, ...]


def addons_dir() -> Path:
    """``include/addons``: the pinned releases and their local (trimmed) copies."""
    return include_dir() / "addons"


def controller_releases(path: Path | None = None) -> dict[str, ControllerRelease]:
    """The pinned releases by controller name (``jobset``, ``kueue``), in apply order."""
    path = Path(path) if path else addons_dir() / "releases.yaml"
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise CatalogError(f"{path}: cannot read the pinned controller releases ({exc})") from None
    rows = (data or {}).get("controllers") if isinstance(data, Mapping) else None
    if not isinstance(rows, Mapping) or not rows:
        raise CatalogError(f"{path}: expected a 'controllers' mapping of name -> release")
    out = {}
    for name, row in rows.items():
        fields = ("version", "url", "file", "image", "api_versions")
        if not isinstance(row, Mapping) or any(not row.get(f) for f in fields):
            raise CatalogError(f"{path}: controller {name!r} needs {', '.join(fields)}")
        out[str(name)] = ControllerRelease(
            name=str(name),
            version=str(row["version"]),
            url=str(row["url"]),
            file=str(row["file"]),
            image=str(row["image"]),
            api_versions=tuple(map(str, row["api_versions"])),
        )
    return out


def release_source(release: ControllerRelease, source: str | None = None) -> str:
    """Where ``release``'s manifest is read from: ``source`` if given, else the copy in
    ``$GPUFLEET_ADDONS_DIR``, else the official release URL."""
    if source:
        return str(source)
    folder = os.environ.get(ADDONS_DIR_ENV)
    if folder:
        return str(Path(folder) / release.file)
    return release.url


def _read(source: str) -> str:
    if source.startswith(("http://", "https://")):
        try:
            with urllib.request.urlopen(source, timeout=HTTP_TIMEOUT_S) as response:  # noqa: S310
                body = response.read(MAX_MANIFEST_BYTES + 1)
        except urllib.error.HTTPError as exc:
            message = f"fetching the release manifest {source} failed: HTTP {exc.code}"
            if exc.code == 429 or exc.code >= 500:
                raise TransientBackendError(message) from None
            raise CatalogError(
                f"{message}; check the URL, or set {ADDONS_DIR_ENV} to a folder holding a copy"
            ) from None
        except (urllib.error.URLError, TimeoutError, ConnectionError) as exc:
            reason = getattr(exc, "reason", exc)
            raise TransientBackendError(
                f"fetching the release manifest {source} failed ({reason}); offline, set "
                f"{ADDONS_DIR_ENV} to a folder holding a copy"
            ) from None
        if len(body) > MAX_MANIFEST_BYTES:
            raise CatalogError(f"{source}: larger than {MAX_MANIFEST_BYTES} bytes; not a manifest")
        return body.decode("utf-8")
    if source.startswith("file://"):
        source = source[len("file://") :]
    try:
        return Path(source).read_text()
    except OSError as exc:
        raise CatalogError(
            f"cannot read the release manifest {source} ({exc.strerror or exc}); set "
            f"{ADDONS_DIR_ENV} or the cluster's source to a folder/file holding it"
        ) from None


def parse_release(text: str, source: str) -> list[dict[str, Any]]:
    """The Kubernetes objects of a multi-document YAML manifest; ``CatalogError`` naming
    ``source`` and the document when it is not a list of objects (each a mapping with string
    ``apiVersion``, ``kind`` and ``metadata.name``). ``kind: List`` documents are unpacked."""
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        raise CatalogError(f"{source}: not YAML ({exc})") from None
    objects: list[Any] = []
    for doc in docs:
        if isinstance(doc, Mapping) and doc.get("kind") == "List":
            objects.extend(doc.get("items") or ())
        elif isinstance(doc, list):
            objects.extend(doc)
        else:
            objects.append(doc)
    if not objects:
        raise CatalogError(f"{source}: holds no Kubernetes objects")
    for i, obj in enumerate(objects):
        meta = obj.get("metadata") if isinstance(obj, Mapping) else None
        if (
            not isinstance(obj, Mapping)
            or not isinstance(obj.get("apiVersion"), str)
            or not isinstance(obj.get("kind"), str)
            or not isinstance(meta, Mapping)
            or not isinstance(meta.get("name"), str)
        ):
            shown = repr(obj)[:80]
            raise CatalogError(
                f"{source}: document {i + 1} is not a Kubernetes object (a mapping with "
                f"apiVersion, kind and metadata.name): {shown}"
            )
    return [dict(o) for o in objects]


def load_release(release: ControllerRelease, source: str | None = None) -> list[dict[str, Any]]:
    """The objects of ``release``'s manifest from ``release_source(release, source)``."""
    where = release_source(release, source)
    return parse_release(_read(where), where)


def load_controller_releases(
    sources: Mapping[str, str] | None = None, *, folder: str | None = None
) -> dict[str, list[dict[str, Any]]]:
    """Every pinned controller's objects, by name in apply order. ``sources`` overrides where
    one controller is read from (a path or URL); ``folder`` (a local folder or an http(s) base
    URL, e.g. a cluster's setting or a mirror) holds them all under their pinned file names."""
    releases = controller_releases()
    sources = dict(sources or {})
    if folder:
        base = str(folder).rstrip("/")
        for name, rel in releases.items():
            sources.setdefault(name, f"{base}/{rel.file}")
    unknown = set(sources) - set(releases)
    if unknown:
        raise CatalogError(
            f"no pinned controller named {', '.join(sorted(unknown))} "
            f"(pinned: {', '.join(releases)})"
        )
    return {name: load_release(rel, sources.get(name)) for name, rel in releases.items()}
