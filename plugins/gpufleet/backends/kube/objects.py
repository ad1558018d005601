"""Objects of any kind in ``kinds.KINDS``: ``apply`` (create if absent), ``ensure_object``
(read-compare-patch, for add-ons) and ``delete``."""

from __future__ import annotations

import logging
from typing import Any

from gpufleet.backends.base import ObjectChange
from gpufleet.backends.kube.client import KubeApi, ref
from gpufleet.backends.kube.converge import differences, patch_body
from gpufleet.backends.kube.errors import KubeApiError, KubeConflict, KubeNotFound
from gpufleet.backends.kube.kinds import KindInfo, kind_info
from gpufleet.domain.kueue import refused_change
from gpufleet.errors import BackendError, TransientBackendError

log = logging.getLogger(__name__)

_FOREGROUND_KINDS = frozenset({"Job", "JobSet"})


class KubeObjects(KubeApi):
    """Create-if-absent, converge and delete, for every kind in ``kinds.KINDS``."""

    def apply(self, manifest: dict[str, Any]) -> dict[str, Any]:
        """Create the object; if one of that kind and name exists, return it untouched.

        Idempotent "ensure": a 409 from the create (``KubeConflict``) reads the stored object
        back; it is never retried. An object that exists but is being deleted, or that is gone
        again by the time it is read, raises TransientBackendError (retry once it is gone).
        """
        info, body, name, namespace = self._addressed(manifest)
        try:
            created = self._create(info, body, namespace)
        except KubeConflict as exc:
            existing = self._read_existing(info, name, namespace, exc)
            log.info("%s %s already exists; left as is", info.kind, ref(name, namespace))
            return existing
        if not isinstance(created, dict) or not created.get("metadata"):
            # Some servers/emulators answer a create with an empty body: read it back.
            created = self._read(info, name, namespace)
        log.info("created %s %s", info.kind, ref(name, namespace))
        return created

    def ensure_object(self, manifest: dict[str, Any]) -> ObjectChange:
        """Converge one object on ``manifest``: ``created``, ``unchanged`` or ``updated``.

        Reads it first. Absent: created (a 409, someone created it meanwhile, reads it again and
        goes on comparing). Present and already carrying every declared field of the manifest
        (``converge.differences``: labels, annotations and every top-level section but status):
        ``unchanged``, nothing written, so a second run sends no write. Otherwise one JSON merge
        patch of the manifest's declared fields onto it: ``updated``. An object being deleted,
        or deleted between the read and the patch, raises TransientBackendError (retry). An
        object whose spec Kueue keeps immutable (a Topology, a ResourceFlavor naming one) and
        that holds another spec raises BackendError naming it, and nothing is written
        (``domain.kueue.refused_change``).
        """
        info, body, name, namespace = self._addressed(manifest)
        where = f"{info.kind} {ref(name, namespace)}"
        try:
            stored = self._read(info, name, namespace)
        except KubeNotFound:
            try:
                self._create(info, body, namespace)
            except KubeConflict as exc:  # created meanwhile: compare with what is there
                stored = self._read_existing(info, name, namespace, exc)
            else:
                log.info("created %s", where)
                return ObjectChange.CREATED
        else:
            if (stored.get("metadata") or {}).get("deletionTimestamp"):
                raise TransientBackendError(
                    f"{where} exists but is being deleted; retry once it is gone"
                )
        refusal = refused_change(stored, body)
        if refusal:
            raise BackendError(refusal)
        changed = differences(stored, body)
        if not changed:
            log.info("%s unchanged", where)
            return ObjectChange.UNCHANGED
        try:
            self._merge_patch(info, name, namespace, patch_body(body))
        except KubeNotFound as exc:
            raise TransientBackendError(
                f"{where} was deleted while being updated; retry to create it again"
            ) from exc
        except KubeApiError as exc:
            if exc.status != 422:
                raise
            raise KubeApiError(
                f"{exc} (fields that differ: {', '.join(changed)}). A field the API server "
                f"refuses to change is immutable: delete {where} so it is created again, or "
                "put the stored value back in the manifest",
                status=exc.status,
                reason=exc.reason,
            ) from exc
        log.info("updated %s: %s", where, ", ".join(changed))
        return ObjectChange.UPDATED

    def _addressed(
        self, manifest: dict[str, Any]
    ) -> tuple[KindInfo, dict[str, Any], str, str | None]:
        """The kind's API location and the manifest as it is sent: its apiVersion spelled out,
        its namespace set (the default one when missing) or, for a cluster-scoped kind, dropped."""
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
        return info, body, name, namespace

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

    def delete(
        self, kind: str, name: str, namespace: str | None = None, *, api_version: str | None = None
    ) -> bool:
        """Delete (foreground propagation for Job/JobSet); False if it did not exist.

        ``api_version`` picks another served version of the kind (a MutatingAdmissionPolicy
        at ``admissionregistration.k8s.io/v1`` rather than the table's v1beta1).
        """
        info = kind_info(kind, api_version)
        namespace = (namespace or self.default_namespace) if info.namespaced else None
        policy = "Foreground" if info.kind in _FOREGROUND_KINDS else "Background"
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": policy}
        try:
            self._delete(info, name, namespace, body)
        except KubeNotFound:
            return False
        log.info("deleted %s %s (%s)", info.kind, ref(name, namespace), policy)
        return True
