"""The HTTP edge of the CLI's Airflow REST client (:mod:`gpufleet.cli.airflow_api`).

- The errors it raises: every failure is an :class:`AirflowApiError` (a
  :class:`~gpufleet.errors.GpufleetError`) whose message says what was wrong and what to do,
  so the CLI prints it as is.
- How an error answer becomes one line: the ``detail`` of FastAPI's error shape, as Airflow 3
  sends it, with a Param or pydantic validation failure turned into the fields at fault.
- What the transport may do with credentials: user info is cut from a URL before it is used
  or shown, and urllib3's retry policy is given a rule that refuses a redirect to another
  origin.

No I/O here; the policy runs inside urllib3.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any
from urllib.parse import urljoin, urlsplit, urlunsplit

from airflow_client.client import DAGRunResponse
from urllib3.util import Retry, parse_url

from gpufleet.errors import GpufleetError

_PARAM_ERROR = re.compile(r"Invalid input for param (?P<name>[^:\s]+): (?P<msg>.*)")


class AirflowApiError(GpufleetError):
    """The Airflow REST API refused a request or could not be reached."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class AirflowUnreachable(AirflowApiError):
    """Nothing answers at the URL (connection refused, DNS, timeout)."""


class AirflowAuthError(AirflowApiError):
    """401: the credentials are wrong or the token was refused."""


class AirflowForbidden(AirflowApiError):
    """403: the user is known but may not do this."""


class DagNotFound(AirflowApiError):
    """404 for a DAG: unknown id, or not parsed (yet)."""


class DagRunNotFound(AirflowApiError):
    """404 for a DAG run."""


class DagPaused(AirflowApiError):
    """The DAG is paused: a run would be created but never scheduled."""


class DagRunConflict(AirflowApiError):
    """409: a run with this run id exists already."""


class CrossOriginRedirect(AirflowApiError):
    """The server redirected a request that carries credentials to another origin."""


class InvalidRequest(AirflowApiError):
    """400/422: the API rejected the body; ``fields`` names what was wrong."""

    def __init__(self, message: str, status: int | None, fields: list[str]) -> None:
        super().__init__(message, status)
        self.fields = fields


class WaitTimeout(AirflowApiError):
    """The run did not reach a terminal state in time."""

    def __init__(self, message: str, run: DAGRunResponse) -> None:
        super().__init__(message)
        self.run = run


def detail_of(body: str | bytes | None, reason: str | None = None) -> Any:
    """The ``detail`` of an error answer (FastAPI style), else the body text."""
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else (body or "")
    try:
        parsed = json.loads(text)
    except ValueError:
        return text.strip() or reason or ""
    if isinstance(parsed, dict) and "detail" in parsed:
        return parsed["detail"]
    return parsed


def field_name(loc: Iterable[Any]) -> str:
    """Turn a pydantic ``loc`` (``["body", "conf", "nodes"]``) into ``conf.nodes``."""
    parts = [str(p) for p in loc]
    if parts and parts[0] in ("body", "query", "path"):
        parts = parts[1:]
    return ".".join(parts) or "body"


def describe_validation_error(detail: Any) -> tuple[str, list[str]]:
    """Summarise a 400/422 ``detail`` in one line; returns (message, field names).

    ``detail`` is either pydantic's list of ``{"loc", "msg", ...}`` dicts or a string such as
    Airflow's ``Invalid input for param nodes: 99 is greater than the maximum of 4`` followed by
    the jsonschema dump (which we drop).
    """
    if isinstance(detail, list):
        fields: list[str] = []
        parts: list[str] = []
        for item in detail:
            if not isinstance(item, dict):
                parts.append(str(item))
                continue
            field = field_name(item.get("loc") or ())
            msg = str(item.get("msg") or item.get("type") or "invalid")
            if item.get("type") == "missing":
                msg = "required field is missing"
            elif item.get("type") == "extra_forbidden":
                msg = "unknown field (the API does not accept it)"
            fields.append(field)
            parts.append(f"{field}: {msg}")
        return "; ".join(parts) or "invalid request", fields
    text = str(detail).strip()
    first_line = text.splitlines()[0] if text else "invalid request"
    match = _PARAM_ERROR.search(first_line)
    if match:
        field = f"conf.{match['name']}"
        return f"{field}: {match['msg'].strip()}", [field]
    return first_line, []


def one_line(detail: Any) -> str:
    if isinstance(detail, list):
        return describe_validation_error(detail)[0]
    text = str(detail).strip()
    return text.splitlines()[0] if text else "(no detail)"


def root_cause(reason: object) -> str:
    """The innermost reason of a connection error, e.g. ``Connection refused``."""
    match = re.search(r"\[Errno -?\d+\] ([^'\")\]]+)", str(reason))
    if match:
        return match.group(1).strip()
    return one_line(reason)[:200]


# -- what the transport may do with credentials -------------------------------------------


def without_userinfo(url: str) -> str:
    """``url`` without its ``user:password@`` part, if any."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = parse_url(url)
    scheme = (parts.scheme or "").lower()
    return scheme, (parts.host or "").lower(), parts.port or {"http": 80, "https": 443}.get(scheme)


class Redirected(Exception):
    """Raised inside urllib3 when a redirect would leave the origin; ``target`` is shown."""

    def __init__(self, target: str) -> None:
        super().__init__(target)
        self.target = target


class _SameOriginRetry(Retry):
    """urllib3's retry policy, refusing to follow a redirect to another origin.

    Every request carries credentials. urllib3 alone would follow such a redirect, dropping the
    ``Authorization`` header but resending a 307/308's body (the password, for ``/auth/token``).
    """

    def increment(  # type: ignore[override]
        self,
        method: str | None = None,
        url: str | None = None,
        response: Any = None,
        error: Exception | None = None,
        _pool: Any = None,
        _stacktrace: Any = None,
    ) -> Retry:
        location = response.get_redirect_location() if response is not None else None
        if location and url:
            target = urljoin(url, location)
            if _origin(target) != _origin(url):
                raise Redirected(without_userinfo(target))
        return super().increment(method, url, response, error, _pool, _stacktrace)


def retry_policy() -> Retry:
    """Retry failed connects (any method) and dropped reads (GET/PATCH only); no 5xx retries."""
    return _SameOriginRetry(
        total=None,
        connect=2,
        read=2,
        redirect=3,
        status=0,
        other=0,
        backoff_factor=0.3,
        allowed_methods=frozenset({"GET", "PATCH"}),
        raise_on_status=False,
    )
