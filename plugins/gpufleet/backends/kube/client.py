"""The connection to one cluster and the plumbing of every call: ``KubeApi``.

Design: docs/design/cloud-backends.md.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from functools import cached_property
from typing import TYPE_CHECKING, Any

from gpufleet.backends.kube.errors import api_error, connection_error
from gpufleet.backends.kube.kinds import KindInfo
from gpufleet.errors import BackendError

if TYPE_CHECKING:
    from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook


_JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"


class KubeApi:
    """The official clients of one cluster, and how calls are made.

    The cluster is the Airflow connection ``conn_id``, or, when ``kube_config`` is given, the
    kube config dict (``conn_id`` is then ignored).
    """

    def __init__(
        self,
        conn_id: str | None = "kubernetes_default",
        *,
        hook: KubernetesHook | None = None,
        kube_config: dict[str, Any] | None = None,
    ):
        if kube_config is not None and not isinstance(kube_config, dict):
            raise BackendError(
                f"kube_config must be a kube config dict (clusters, users, contexts), "
                f"not {type(kube_config).__name__}"
            )
        self.kube_config = kube_config
        self.conn_id = None if kube_config is not None else (conn_id or "kubernetes_default")
        if hook is not None:
            self.__dict__["hook"] = hook

    @property
    def source(self) -> str:
        """Where the credentials come from, as error messages name it."""
        if self.kube_config is not None:
            return f"the kube config of cluster {_current_context(self.kube_config)!r}"
        return f"Airflow connection {self.conn_id!r}"

    # ---- clients -------------------------------------------------------------------------

    @cached_property
    def hook(self) -> KubernetesHook:
        from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook

        if self.kube_config is None:
            return KubernetesHook(conn_id=self.conn_id)
        from kubernetes import client

        # No connection id at all (the hook would otherwise fall back to kubernetes_default),
        # and a Configuration of our own: without one, the kube config is loaded into the
        # client's process-wide default.
        return KubernetesHook(
            conn_id=None,
            kubernetes_conn_id=None,
            config_dict=self.kube_config,
            client_configuration=client.Configuration(),
        )

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
            if self.kube_config is not None:
                hint = (
                    "Check the kube config the cloud backend produced (clusters[].cluster."
                    "server, users[].user.token, current-context)."
                )
            else:
                hint = (
                    "Check that the connection exists (conn_type kubernetes) and that its "
                    "kube_config / kube_config_path / in_cluster extra is valid."
                )
            raise BackendError(
                f"cannot build a Kubernetes client from {self.source}: "
                f"{type(exc).__name__}: {exc}. {hint}"
            ) from exc
        api_client.configuration.retries = False
        api_client.rest_client = rest.RESTClientObject(api_client.configuration)
        return api_client

    @cached_property
    def core(self) -> Any:
        from kubernetes import client

        return client.CoreV1Api(self.api_client)

    @cached_property
    def default_namespace(self) -> str:
        """The connection's namespace extra, or the kube config context's, or ``default``."""
        if self.kube_config is not None:
            return _context_namespace(self.kube_config) or "default"
        try:
            return self.hook.get_namespace() or "default"
        except Exception:  # the namespace is a convenience; the real error surfaces on use
            return "default"

    def server_version(self) -> str:
        """The API server's ``major.minor`` from ``/version`` (``"1.33"``; GKE's ``"28+"``
        minor reads as 28). Unreachable: TransientBackendError naming the cluster."""
        info = self._request("read the API server version", "GET", "/version") or {}
        major = _leading_number(info.get("major"))
        minor = _leading_number(info.get("minor"))
        if major is None or minor is None:  # some distributions leave these empty
            match = re.match(r"v?(\d+)\.(\d+)", str(info.get("gitVersion") or ""))
            if match is None:
                raise BackendError(
                    f"the API server of {self.source} answered /version without a version: "
                    f"{json.dumps(info)[:200]}"
                )
            major, minor = match.groups()
        return f"{major}.{minor}"

    # ---- call plumbing -------------------------------------------------------------------

    def _raw(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> bytes:
        """Call an official-client method and return the raw body; wrap every failure."""
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError as Urllib3Error

        try:
            resp = fn(*args, _preload_content=False, **kwargs)
        except ApiException as exc:
            raise api_error(what, exc, self.source) from exc
        except (Urllib3Error, OSError) as exc:
            raise connection_error(what, exc, self.source) from exc
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

    # ---- any kind, by its REST path ------------------------------------------------------

    def _request(
        self,
        what: str,
        method: str,
        path: str,
        *,
        body: Any = None,
        content_type: str = _JSON,
        query: dict[str, str] | None = None,
    ) -> Any:
        """``method`` on ``path`` through ``ApiClient.call_api``; the decoded JSON answer."""
        headers = {"Accept": _JSON}
        if body is not None:
            headers["Content-Type"] = content_type
        return self._json(
            what,
            self.api_client.call_api,
            path,
            method,
            query_params=list((query or {}).items()),
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
            response_types_map={},
        )

    def _read(self, info: KindInfo, name: str, namespace: str | None) -> dict[str, Any]:
        return self._request(
            f"read {info.kind} {ref(name, namespace)}", "GET", info.path(namespace, name)
        )

    def _create(self, info: KindInfo, body: dict[str, Any], namespace: str | None) -> Any:
        name = body["metadata"]["name"]
        return self._request(
            f"create {info.kind} {ref(name, namespace)}", "POST", info.path(namespace), body=body
        )

    def _merge_patch(
        self, info: KindInfo, name: str, namespace: str | None, body: dict[str, Any]
    ) -> Any:
        return self._request(
            f"update {info.kind} {ref(name, namespace)}",
            "PATCH",
            info.path(namespace, name),
            body=body,
            content_type=MERGE_PATCH,
        )

    def _delete(
        self, info: KindInfo, name: str, namespace: str | None, body: dict[str, Any]
    ) -> Any:
        return self._request(
            f"delete {info.kind} {ref(name, namespace)}",
            "DELETE",
            info.path(namespace, name),
            body=body,
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


def _current_context(kube_config: dict[str, Any]) -> str:
    return str(kube_config.get("current-context") or "?")


def _context_namespace(kube_config: dict[str, Any]) -> str | None:
    """The namespace of the kube config's current context, if it names one."""
    current = kube_config.get("current-context")
    for entry in kube_config.get("contexts") or ():
        if isinstance(entry, dict) and entry.get("name") == current:
            return (entry.get("context") or {}).get("namespace") or None
    return None


def _leading_number(value: Any) -> str | None:
    """``"28"`` of ``"28+"``; None when there is no number."""
    match = re.match(r"\d+", str(value or ""))
    return str(int(match.group())) if match else None
