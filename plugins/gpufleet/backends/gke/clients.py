"""The Google clients the GKE backend uses, how they reach the API, and what their errors become.

Design: docs/design/cloud-backends.md.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit

from gpufleet.backends.retry import parse_retry_after
from gpufleet.errors import BackendError, TransientBackendError

if TYPE_CHECKING:
    from gpufleet.domain.fleet import Cluster, Region

ENDPOINT_ENV = "GPUFLEET_GCP_ENDPOINT"
DEFAULT_CONN_ID = "google_cloud_default"
CALL_TIMEOUT = 60.0  # seconds per API call
ANONYMOUS_TOKEN = "gpufleet-anonymous-token"  # the bearer token against a plain-HTTP fake
# Seconds to wait before retrying a call GKE refused because another operation holds the
# cluster, and the three messages it refuses with ("Troubleshoot concurrent operations",
# https://cloud.google.com/kubernetes-engine/docs/troubleshooting/concurrent-operations:
# one cluster-level operation or one per node pool at a time, GKE's own auto-upgrades and
# auto-repairs included; find the blocking operation, wait for it, retry).
BUSY_CLUSTER_WAIT = 30.0
_BUSY_CLUSTER = re.compile(
    r"running incompatible operation"
    r"|is currently being created, deleted, updated or repaired"
    r"|please wait and try again once it is done",
    re.IGNORECASE,
)

# The IAM role that grants each service's permissions, named in a 403's advice.
_ROLE_FOR_SERVICE = {
    "container": "roles/container.admin",
    "compute": "roles/compute.networkAdmin (networks), roles/compute.viewer (reservations, "
    "their blocks and sub-blocks), roles/compute.instanceAdmin.v1 (host-fault reports) or "
    "roles/compute.admin (sub-block fault reports)",
    "lustre": "roles/lustre.admin",
}

T = TypeVar("T")


@dataclass(frozen=True)
class Endpoint:
    """Where the Google APIs are: ``host`` None means each API's default host."""

    host: str | None = None
    scheme: str = "https"

    @property
    def anonymous(self) -> bool:
        return self.scheme == "http"

    @classmethod
    def from_env(cls) -> Endpoint:
        return cls.parse(os.environ.get(ENDPOINT_ENV, ""))

    @classmethod
    def parse(cls, raw: str) -> Endpoint:
        """``http://host:port`` or ``https://host[:port]``; empty means Google's hosts."""
        raw = raw.strip()
        if not raw:
            return cls()
        parts = urlsplit(raw)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise BackendError(
                f"{ENDPOINT_ENV}={raw!r} is not an endpoint: give http://host:port (a local "
                "fake) or https://host[:port] (a private endpoint), or unset it for Google's"
            )
        return cls(host=parts.netloc, scheme=parts.scheme)


def translate(exc: BaseException, what: str, permission: str | None = None) -> BackendError:
    """The gpufleet error for a failed Google call on ``what`` (``"create cluster x"``)."""
    from google.api_core import exceptions as gexc

    if isinstance(exc, BackendError):
        return exc
    if isinstance(exc, gexc.GoogleAPICallError):
        code = exc.code if isinstance(exc.code, int) else None
        message = exc.message or str(exc)
        response = getattr(exc, "response", None)
        headers = getattr(response, "headers", None) or {}
        retry_after = parse_retry_after(headers.get("Retry-After"))
        if code is None or code == 429 or code >= 500:
            return TransientBackendError(
                f"{what}: the Google API answered {code or 'an error'} ({message}); this is "
                "usually temporary and the call is retried",
                retry_after=retry_after,
            )
        if code in (400, 409) and _BUSY_CLUSTER.search(message):
            return TransientBackendError(
                f"{what}: the cluster is busy with another operation (an upgrade, a repair or "
                f"another change: {message}); this is temporary and the call is retried after "
                f"{BUSY_CLUSTER_WAIT:.0f} s; if it persists, run again once the operation in "
                "the console's Operations list has finished",
                retry_after=max(retry_after or 0.0, BUSY_CLUSTER_WAIT),
            )
        if code in (401, 403):
            service = (permission or "").split(".")[0]
            role = _ROLE_FOR_SERVICE.get(service, "a role that includes it")
            need = f"permission {permission!r}" if permission else "the missing permission"
            return BackendError(
                f"{what}: permission denied ({code}: {message}). Grant the identity of the "
                f"Google connection {need} (for example {role}) on the project"
            )
        if code == 404:
            return BackendError(
                f"{what}: not found ({message}); check the project, location and names in the "
                "catalog"
            )
        return BackendError(
            f"{what}: the Google API refused the request ({code}: {message}); fix the catalog "
            "entry or the request it produced and run again"
        )
    if isinstance(exc, gexc.RetryError | ConnectionError | TimeoutError) or _is_connection(exc):
        return TransientBackendError(f"{what}: could not reach the Google API ({exc})")
    return BackendError(f"{what}: {type(exc).__name__}: {exc}")


def _is_connection(exc: BaseException) -> bool:
    import requests
    from google.auth import exceptions as auth_exc

    return isinstance(exc, requests.exceptions.ConnectionError | auth_exc.TransportError)


def call(what: str, permission: str | None, fn: Callable[..., T], /, **kwargs: Any) -> T:
    """Call a client method without client-side retries; errors become gpufleet errors."""
    try:
        return fn(retry=None, timeout=CALL_TIMEOUT, **kwargs)
    except Exception as exc:  # noqa: BLE001 - every failure is translated, none swallowed
        raise translate(exc, what, permission) from exc


def get_or_none(what: str, permission: str | None, fn: Callable[..., T], /, **kwargs: Any):
    """Like ``call`` for a read, with None when the resource does not exist (404)."""
    from google.api_core import exceptions as gexc

    try:
        return fn(retry=None, timeout=CALL_TIMEOUT, **kwargs)
    except gexc.NotFound:
        return None
    except Exception as exc:  # noqa: BLE001
        raise translate(exc, what, permission) from exc


class GcpClients:
    """Lazily built clients for one Google connection and endpoint."""

    def __init__(self, conn_id: str, endpoint: Endpoint | None = None) -> None:
        self.conn_id = conn_id
        self.endpoint = endpoint or Endpoint.from_env()

    @cached_property
    def credentials(self) -> Any:
        if self.endpoint.anonymous:
            from google.auth.credentials import AnonymousCredentials

            return AnonymousCredentials()
        from airflow.providers.google.common.hooks.base_google import GoogleBaseHook

        try:
            return GoogleBaseHook(gcp_conn_id=self.conn_id).get_credentials()
        except Exception as exc:  # noqa: BLE001 - a missing/bad connection is the user's to fix
            raise BackendError(
                f"cannot get Google credentials from Airflow connection {self.conn_id!r} "
                f"({exc}); create it (type google_cloud_platform) or name another one in the "
                "catalog's connections.cloud"
            ) from exc

    def access_token(self) -> tuple[str, float | None]:
        """An OAuth access token for the connection's identity and when it expires."""
        if self.endpoint.anonymous:
            return ANONYMOUS_TOKEN, None
        import google.auth.transport.requests

        creds = self.credentials
        try:
            creds.refresh(google.auth.transport.requests.Request())
        except Exception as exc:  # noqa: BLE001
            raise translate(exc, "refresh the Google access token") from exc
        expiry = getattr(creds, "expiry", None)
        return creds.token, (expiry.timestamp() if expiry else None)

    def _build(self, client_cls: type, transport_cls: type) -> Any:
        if self.endpoint.host is None:
            return client_cls(credentials=self.credentials, transport="rest")
        transport = transport_cls(
            host=self.endpoint.host, url_scheme=self.endpoint.scheme, credentials=self.credentials
        )
        return client_cls(transport=transport)

    @cached_property
    def container(self) -> Any:
        from google.cloud import container_v1
        from google.cloud.container_v1.services.cluster_manager.transports.rest import (
            ClusterManagerRestTransport,
        )

        return self._build(container_v1.ClusterManagerClient, ClusterManagerRestTransport)

    @cached_property
    def lustre(self) -> Any:
        from google.cloud import lustre_v1
        from google.cloud.lustre_v1.services.lustre.transports.rest import LustreRestTransport

        return self._build(lustre_v1.LustreClient, LustreRestTransport)

    def compute(self, name: str) -> Any:
        """A compute_v1 client by service name: ``networks``, ``subnetworks``,
        ``reservations``, ``reservation_blocks``, ``reservation_sub_blocks``, ``instances``,
        ``global_operations``, ``region_operations``, ``zone_operations``."""
        cache = self.__dict__.setdefault("_compute", {})
        if name not in cache:
            import importlib

            from google.cloud import compute_v1

            camel = "".join(part.capitalize() for part in name.split("_"))
            module = importlib.import_module(
                f"google.cloud.compute_v1.services.{name}.transports.rest"
            )
            cache[name] = self._build(
                getattr(compute_v1, f"{camel}Client"), getattr(module, f"{camel}RestTransport")
            )
        return cache[name]

    def has_compute(self, name: str) -> bool:
        from google.cloud import compute_v1

        camel = "".join(part.capitalize() for part in name.split("_"))
        return hasattr(compute_v1, f"{camel}Client")

    def wait_compute(
        self, op: Any, what: str, *, poll_interval: float, timeout: float, project: str
    ) -> None:
        """Wait for a compute operation through an operations client on our own endpoint;
        an operation that ends with an error raises ``BackendError`` with its messages."""
        if op.zone:
            client, scope = self.compute("zone_operations"), {"zone": op.zone.rsplit("/", 1)[-1]}
        elif op.region:
            client, scope = (
                self.compute("region_operations"),
                {"region": op.region.rsplit("/", 1)[-1]},
            )
        else:
            client, scope = self.compute("global_operations"), {}
        deadline = time.monotonic() + timeout
        while getattr(op.status, "name", op.status) != "DONE":
            if time.monotonic() > deadline:
                raise TransientBackendError(
                    f"{what}: operation {op.name} still running after {timeout:.0f} s; run "
                    "again to resume (what exists is found, not recreated)"
                )
            time.sleep(poll_interval)
            op = call(
                f"{what} (poll operation {op.name})",
                None,
                client.get,
                project=project,
                operation=op.name,
                **scope,
            )
        if op.error and op.error.errors:
            details = "; ".join(f"{e.code}: {e.message}" for e in op.error.errors)
            raise BackendError(f"{what}: the operation failed ({details})")


def console(path: str, project: str) -> str:
    """A Google Cloud console link."""
    return f"https://console.cloud.google.com/{path}?project={project}"


@dataclass
class Scope:
    """What every GKE operation needs: the catalog entries, the clients and the wait settings."""

    cluster: Cluster
    region: Region
    clients: GcpClients
    poll_interval: float = 2.0
    operation_timeout: float = 900.0

    @property
    def project(self) -> str:
        assert self.cluster.project, "a gke cluster names its project (the catalog checks it)"
        return self.cluster.project

    @property
    def zone(self) -> str:
        return self.cluster.location

    @property
    def gcp_region(self) -> str:
        """The region of the cluster's location (``us-central1-b`` -> ``us-central1``)."""
        return region_of(self.cluster.location)


def region_of(location: str) -> str:
    parts = location.split("-")
    return "-".join(parts[:2]) if len(parts) >= 3 else location


def last_segment(url: str | None) -> str | None:
    """``.../zones/us-central1-b`` -> ``us-central1-b`` (None stays None)."""
    return url.rstrip("/").rsplit("/", 1)[-1] if url else None
