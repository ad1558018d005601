"""The connection to one cluster and the plumbing of every call: ``KubeApi``.

The cncf provider's ``KubernetesHook`` is the adapter: it reads the Airflow connection (extras
``kube_config``, ``kube_config_path``, ``in_cluster``, ``namespace``) and builds the official
client's ``ApiClient``, from which the ``CoreV1Api``, ``BatchV1Api`` and ``CustomObjectsApi`` used
here are made, with urllib3's own retries off (``KubeApi.api_client``); this package holds no
HTTP of its own.

Calls are made with ``_preload_content=False`` and the JSON body is decoded here, so every
method sees exactly what the API server stored (unknown fields included, no client-side model
validation) and object-returning methods give plain manifest dicts. It also sidesteps two client
behaviours: custom-object creates answered with an unexpected 2xx code deserialize to ``None``,
and pod logs that happen to parse as JSON get mangled by the model layer. Every failure goes
through ``kube/errors.py``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import cached_property
from typing import TYPE_CHECKING, Any

from gpufleet.backends.kube.errors import api_error, connection_error
from gpufleet.backends.kube.kinds import KindInfo
from gpufleet.errors import BackendError

if TYPE_CHECKING:
    from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook


class KubeApi:
    """The official clients of the Airflow connection ``conn_id``, and how calls are made."""

    def __init__(self, conn_id: str = "kubernetes_default", *, hook: KubernetesHook | None = None):
        self.conn_id = conn_id
        if hook is not None:
            self.__dict__["hook"] = hook

    # ---- clients -------------------------------------------------------------------------

    @cached_property
    def hook(self) -> KubernetesHook:
        from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook

        return KubernetesHook(conn_id=self.conn_id)

    @cached_property
    def api_client(self) -> Any:
        """The hook's ``ApiClient``, with urllib3's own retries turned off.

        The official client leaves ``Configuration.retries`` at None, so urllib3's default
        ``Retry(3)`` would apply underneath: connection errors retried at once, and a 429/503
        to a GET/PUT/DELETE that carries Retry-After slept for (uncapped) and sent again. The
        retry rule of ``backends/retry.py`` is meant to be the only layer, so ``retries=False``
        (the client's own setting) hands every failure to it.
        """
        from kubernetes.client import rest

        try:
            api_client = self.hook.api_client
        except Exception as exc:  # missing connection, unreadable kubeconfig, ...
            raise BackendError(
                f"cannot build a Kubernetes client from Airflow connection {self.conn_id!r}: "
                f"{type(exc).__name__}: {exc}. Check that the connection exists (conn_type "
                "kubernetes) and that its kube_config / kube_config_path / in_cluster extra "
                "is valid."
            ) from exc
        api_client.configuration.retries = False
        api_client.rest_client = rest.RESTClientObject(api_client.configuration)
        return api_client

    @cached_property
    def core(self) -> Any:
        from kubernetes import client

        return client.CoreV1Api(self.api_client)

    @cached_property
    def batch(self) -> Any:
        from kubernetes import client

        return client.BatchV1Api(self.api_client)

    @cached_property
    def custom(self) -> Any:
        from kubernetes import client

        return client.CustomObjectsApi(self.api_client)

    @cached_property
    def default_namespace(self) -> str:
        try:
            return self.hook.get_namespace() or "default"
        except Exception:  # the namespace is a convenience; the real error surfaces on use
            return "default"

    # ---- call plumbing -------------------------------------------------------------------

    def _raw(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> bytes:
        """Call an official-client method and return the raw body; wrap every failure."""
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError as Urllib3Error

        try:
            resp = fn(*args, _preload_content=False, **kwargs)
        except ApiException as exc:
            raise api_error(what, exc, self.conn_id) from exc
        except (Urllib3Error, OSError) as exc:
            raise connection_error(what, exc, self.conn_id) from exc
        try:
            return resp.data
        finally:
            resp.release_conn()

    def _json(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        data = self._raw(what, fn, *args, **kwargs)
        if not data:
            return None
        try:
            return json.loads(data)
        except ValueError as exc:
            raise BackendError(
                f"{what}: the Kubernetes API answered with something that is not JSON: "
                f"{data[:200]!r}"
            ) from exc

    def _list_items(
        self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any
    ) -> list[dict[str, Any]]:
        """All items of a list call, following ``continue`` tokens if the server pages."""
        out: list[dict[str, Any]] = []
        page_kwargs = dict(kwargs)
        while True:
            page = self._json(what, fn, *args, **page_kwargs) or {}
            out.extend(page.get("items") or [])
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return out
            page_kwargs["_continue"] = token

    # ---- any kind, by its KindInfo -------------------------------------------------------

    def _kind_call(
        self, verb: str, info: KindInfo, namespace: str | None, **kwargs: Any
    ) -> tuple[Callable[..., Any], dict[str, Any]]:
        """The official-client method for ``verb`` (read/create/delete) on ``info`` + kwargs."""
        if info.api == "custom":
            scope = "namespaced" if info.namespaced else "cluster"
            fn = getattr(self.custom, f"{'get' if verb == 'read' else verb}_{scope}_custom_object")
            kwargs.update(group=info.group, version=info.version, plural=info.plural)
        else:
            api = self.core if info.api == "core" else self.batch
            fn = getattr(api, f"{verb}_{'namespaced_' if info.namespaced else ''}{info.snake}")
        if info.namespaced:
            kwargs["namespace"] = namespace
        return fn, kwargs

    def _read(self, info: KindInfo, name: str, namespace: str | None) -> dict[str, Any]:
        fn, kwargs = self._kind_call("read", info, namespace, name=name)
        return self._json(f"read {info.kind} {ref(name, namespace)}", fn, **kwargs)

    def _create(self, info: KindInfo, body: dict[str, Any], namespace: str | None) -> Any:
        fn, kwargs = self._kind_call("create", info, namespace, body=body)
        return self._json(
            f"create {info.kind} {ref(body['metadata']['name'], namespace)}", fn, **kwargs
        )


def ref(name: str, namespace: str | None) -> str:
    """``namespace/name``, or ``name`` for a cluster-scoped object."""
    return f"{namespace}/{name}" if namespace else name


def cond_message(cond: dict[str, Any]) -> str | None:
    """``reason: message`` of a status condition, or whichever of the two it has."""
    reason, message = cond.get("reason"), cond.get("message")
    if reason and message:
        return f"{reason}: {message}"
    return reason or message or None
