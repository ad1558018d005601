"""What a failed Kubernetes API call becomes: the one place its HTTP status is classified.

Design: docs/design/cloud-backends.md.
"""

from __future__ import annotations

import json
from typing import Any

from gpufleet.backends.base import WatchExpired
from gpufleet.backends.retry import is_transient_status, parse_retry_after
from gpufleet.errors import BackendError, TransientBackendError


class KubeApiError(BackendError):
    """A Kubernetes API call answered with an error status (``status``, ``reason``)."""

    def __init__(self, message: str, *, status: int, reason: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason


class KubeNotFound(KubeApiError):
    """404: the object (or the namespace it would live in) does not exist."""


class KubeConflict(KubeApiError):
    """409: the object already exists (on create) or changed since it was read (on update)."""


class KubeGone(KubeApiError, WatchExpired):
    """410 Gone: the resourceVersion asked for is too old (compacted): list again."""


class TransientKubeApiError(KubeApiError, TransientBackendError):
    """Throttled (429) or a server error (5xx): a retry may succeed."""

    def __init__(
        self, message: str, *, status: int, reason: str = "", retry_after: float | None = None
    ) -> None:
        super().__init__(message, status=status, reason=reason)
        self.retry_after = retry_after


class KubeTooManyRequests(TransientKubeApiError):
    """429: throttled by the API server, or an eviction a PodDisruptionBudget refuses for now."""


def api_error(what: str, exc: Any, source: str) -> KubeApiError:
    """The error a person reads for an ApiException: call, object, status, reason, message.

    ``source`` names where the client's credentials came from (``Airflow connection 'x'``,
    ``the kube config of cluster 'y'``), so a 401/403 or TLS failure says where to look."""
    status = getattr(exc, "status", None) or 0
    reason = getattr(exc, "reason", None) or ""
    message = ""
    body = getattr(exc, "body", None)
    if body:
        try:
            payload = json.loads(body)
        except (TypeError, ValueError):
            payload = None
        if isinstance(payload, dict):
            reason = payload.get("reason") or reason
            message = payload.get("message") or ""
        else:
            text = body.decode("utf-8", "replace") if isinstance(body, bytes) else str(body)
            message = text.strip()[:300]
    text = f"{what} failed: HTTP {status} {reason}".rstrip()
    if message:
        text += f": {message}"
    transient = is_transient_status(status)
    if status in (401, 403):
        text += f"; check the credentials and RBAC of {source}"
    elif transient:
        text += "; the API server is throttling or failing, retry later"
    elif status == 0:
        text += f"; check the TLS settings of {source}"
    if transient:
        cls = KubeTooManyRequests if status == 429 else TransientKubeApiError
        headers = getattr(exc, "headers", None) or {}
        retry_after = parse_retry_after(headers.get("Retry-After"))
        return cls(text, status=status, reason=reason, retry_after=retry_after)
    if status == 404:
        return KubeNotFound(text, status=status, reason=reason)
    if status == 409:
        return KubeConflict(text, status=status, reason=reason)
    if status == 410:
        return KubeGone(text, status=status, reason=reason)
    return KubeApiError(text, status=status, reason=reason)


def connection_error(what: str, exc: BaseException, source: str) -> TransientBackendError:
    """A request that got no HTTP answer (refused, reset, timed out): transient."""
    return TransientBackendError(
        f"{what}: cannot reach the Kubernetes API of {source} "
        f"({type(exc).__name__}: {exc}); retry, and check the cluster endpoint if it persists"
    )
