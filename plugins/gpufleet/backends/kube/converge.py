"""Read-compare-patch, the pure half: does a stored object already carry a manifest?

Design: docs/design/cloud-backends.md.
"""

from __future__ import annotations

import base64
from typing import Any

# Top-level keys that are not the object's declared content.
_NOT_COMPARED = frozenset({"apiVersion", "kind", "metadata", "status"})
# The metadata a manifest declares (name and namespace address the object).
COMPARED_METADATA = ("labels", "annotations")


def declared(manifest: dict[str, Any]) -> dict[str, Any]:
    """What of ``manifest`` an object must carry: labels, annotations, top-level sections."""
    out = {k: v for k, v in manifest.items() if k not in _NOT_COMPARED}
    metadata = manifest.get("metadata") or {}
    wanted_meta = {k: metadata[k] for k in COMPARED_METADATA if k in metadata}
    if wanted_meta:
        out["metadata"] = wanted_meta
    if manifest.get("kind") == "Secret" and isinstance(out.get("stringData"), dict):
        data = dict(out.get("data") or {})
        for key, value in out.pop("stringData").items():
            data[key] = None if value is None else base64.b64encode(str(value).encode()).decode()
        out["data"] = data
    return out


def differences(stored: dict[str, Any], manifest: dict[str, Any]) -> list[str]:
    """Dotted paths (``spec.template.spec.containers[0].image``) of declared fields that
    ``stored`` lacks or holds another value for; empty when it already carries the manifest."""
    out: list[str] = []
    _compare(stored, declared(manifest), "", out)
    return out


def patch_body(manifest: dict[str, Any]) -> dict[str, Any]:
    """The merge patch of ``manifest`` onto the stored object: its declared fields, addressed
    by apiVersion/kind/name; nothing the server owns (status, uid, resourceVersion, ...)."""
    body = {k: v for k, v in manifest.items() if k not in _NOT_COMPARED}
    metadata = manifest.get("metadata") or {}
    body["apiVersion"] = manifest["apiVersion"]
    body["kind"] = manifest["kind"]
    body["metadata"] = {
        k: metadata[k] for k in ("name", "namespace", *COMPARED_METADATA) if k in metadata
    }
    return body


def _empty(value: Any) -> bool:
    return value is None or value == {} or value == []


def _compare(stored: Any, wanted: Any, path: str, out: list[str]) -> None:
    if isinstance(wanted, dict):
        if _empty(wanted) and _empty(stored):
            return
        if not isinstance(stored, dict):
            out.append(path or "(object)")
            return
        for key, value in wanted.items():
            sub = f"{path}.{key}" if path else str(key)
            if value is None:
                if stored.get(key) is not None:
                    out.append(sub)
            else:
                _compare(stored.get(key), value, sub, out)
    elif isinstance(wanted, list):
        if _empty(wanted) and _empty(stored):
            return
        if not isinstance(stored, list) or len(stored) != len(wanted):
            out.append(path)
            return
        for i, (have, want) in enumerate(zip(stored, wanted, strict=True)):
            _compare(have, want, f"{path}[{i}]", out)
    elif not _same_scalar(stored, wanted):
        out.append(path)


def _same_scalar(stored: Any, wanted: Any) -> bool:
    if isinstance(stored, bool) or isinstance(wanted, bool):
        return stored is wanted
    if isinstance(wanted, int | float) and isinstance(stored, str):
        # quantities and int-or-string fields come back as strings ("cpu: 1" -> "1")
        return stored == str(wanted)
    return stored == wanted
