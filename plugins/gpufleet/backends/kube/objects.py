"""Objects of any kind gpufleet creates: ``apply`` (an ensure) and ``delete``."""

from __future__ import annotations

import logging
from typing import Any

from gpufleet.backends.kube.client import KubeApi, ref
from gpufleet.backends.kube.errors import KubeConflict, KubeNotFound
from gpufleet.backends.kube.kinds import KindInfo, kind_info
from gpufleet.errors import BackendError, TransientBackendError

log = logging.getLogger(__name__)

_FOREGROUND_KINDS = frozenset({"Job", "JobSet"})


class KubeObjects(KubeApi):
    """Create-if-absent and delete, for every kind in ``kinds.KINDS``."""

    def apply(self, manifest: dict[str, Any]) -> dict[str, Any]:
        """Create the object; if one of that kind and name exists, return it untouched.

        Idempotent "ensure": a 409 from the create (``KubeConflict``) reads the stored object
        back; it is never retried. An object that exists but is being deleted, or that is gone
        again by the time it is read, raises TransientBackendError (retry once it is gone).
        """
        kind = manifest.get("kind")
        metadata = manifest.get("metadata") or {}
        name = metadata.get("name")
        if not kind or not name:
            raise BackendError(
                "cannot apply a manifest without 'kind' and 'metadata.name' "
                f"(got kind={kind!r}, name={name!r})"
            )
        info = kind_info(kind, manifest.get("apiVersion"))
        body = dict(manifest)
        body["apiVersion"] = info.api_version
        body["metadata"] = dict(metadata)
        namespace: str | None = None
        if info.namespaced:
            namespace = metadata.get("namespace") or self.default_namespace
            body["metadata"]["namespace"] = namespace
        else:
            body["metadata"].pop("namespace", None)
        try:
            created = self._create(info, body, namespace)
        except KubeConflict as exc:
            existing = self._read_existing(info, name, namespace, exc)
            log.info("%s %s already exists; left as is", kind, ref(name, namespace))
            return existing
        if not isinstance(created, dict) or not created.get("metadata"):
            # Some servers/emulators answer a create with an empty body: read it back.
            created = self._read(info, name, namespace)
        log.info("created %s %s", kind, ref(name, namespace))
        return created

    def _read_existing(
        self, info: KindInfo, name: str, namespace: str | None, conflict: BackendError
    ) -> dict[str, Any]:
        try:
            existing = self._read(info, name, namespace)
        except KubeNotFound:  # deleted between the create and the read
            raise TransientBackendError(
                f"{info.kind} {ref(name, namespace)} existed a moment ago and is gone "
                "now; retry the apply"
            ) from conflict
        if (existing.get("metadata") or {}).get("deletionTimestamp"):
            raise TransientBackendError(
                f"{info.kind} {ref(name, namespace)} exists but is being deleted; retry the "
                "apply once it is gone"
            ) from conflict
        return existing

    def delete(self, kind: str, name: str, namespace: str | None = None) -> bool:
        """Delete (foreground propagation for Job/JobSet); False if it did not exist."""
        info = kind_info(kind)
        namespace = (namespace or self.default_namespace) if info.namespaced else None
        policy = "Foreground" if info.kind in _FOREGROUND_KINDS else "Background"
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": policy}
        fn, kwargs = self._kind_call("delete", info, namespace, name=name, body=body)
        try:
            self._raw(f"delete {info.kind} {ref(name, namespace)}", fn, **kwargs)
        except KubeNotFound:
            return False
        log.info("deleted %s %s (%s)", info.kind, ref(name, namespace), policy)
        return True
