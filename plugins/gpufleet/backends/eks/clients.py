"""boto3 clients for one EKS cluster of the catalog, and how AWS errors become ours.

Credentials come from the Airflow AWS connection the catalog names
(``connections.cloud``) through the amazon provider's ``AwsBaseHook`` when that provider is
installed, otherwise from boto3's standard chain (environment, shared config, instance role).
Endpoints are boto3's own: ``AWS_ENDPOINT_URL`` and the per-service ``AWS_ENDPOINT_URL_EC2``,
``AWS_ENDPOINT_URL_EKS`` ... (emulators, private endpoints); nothing here overrides them.

botocore's own retries are off (one attempt per call): the retry rule lives in one place,
``backends/retry.py``, which retries the ``TransientBackendError`` raised here with backoff.

Every session made here reads botocore's service models and endpoints through one loader per
process (``share_model_reads``): each backend object has its own session, and botocore caches
what it reads per session.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    NoCredentialsError,
    NoRegionError,
    PartialCredentialsError,
)
from botocore.exceptions import (
    ConnectionError as BotoConnectionError,
)
from botocore.loaders import Loader, create_loader
from botocore.parsers import ResponseParserError  # not a BotoCoreError: an unreadable answer

from gpufleet.backends.retry import is_transient_status, parse_retry_after
from gpufleet.errors import BackendError, TransientBackendError

log = logging.getLogger(__name__)

SERVICES = ("ec2", "eks", "fsx", "sts")

# Error codes AWS uses for "slow down" and "try again later", whatever the HTTP status.
TRANSIENT_CODES = frozenset(
    {
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestLimitExceeded",
        "RequestThrottled",
        "RequestThrottledException",
        "TooManyRequestsException",
        "SlowDown",
        "ServiceUnavailable",
        "ServiceUnavailableException",
        "Unavailable",
        "InternalError",
        "InternalFailure",
        "InternalServerError",
        "ServerException",
    }
)
ACCESS_CODES = frozenset(
    {
        "AccessDenied",
        "AccessDeniedException",
        "UnauthorizedOperation",
        "UnauthorizedException",
        "AuthFailure",
        "InvalidClientTokenId",
        "UnrecognizedClientException",
        "ExpiredToken",
        "ExpiredTokenException",
        "SignatureDoesNotMatch",
    }
)


def not_found(exc: BackendError) -> bool:
    """True when the API said the thing asked for does not exist (EKS
    ``ResourceNotFoundException``, EC2 ``Invalid...NotFound``, FSx ``FileSystemNotFound``)."""
    code = getattr(exc, "code", "") or ""
    return code.endswith(("NotFound", "NotFoundException"))


class AwsApiError(BackendError):
    """A non-retryable AWS API error; ``code`` is the API's error code (``AccessDenied``)."""

    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.code = code


def translate(exc: Exception, service: str, operation: str, what: str) -> BackendError:
    """Our error for a boto3 failure of ``service:operation`` while doing ``what``."""
    action = f"{service}:{operation}"
    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        code = str(error.get("Code") or "Unknown")
        message = error.get("Message") or str(exc)
        meta = exc.response.get("ResponseMetadata", {})
        status = int(meta.get("HTTPStatusCode") or 0)
        if code in TRANSIENT_CODES or is_transient_status(status):
            headers = meta.get("HTTPHeaders", {}) or {}
            return TransientBackendError(
                f"{what}: AWS {action} answered {status} {code} ({message}); retrying may help",
                retry_after=parse_retry_after(headers.get("retry-after")),
            )
        if code in ACCESS_CODES:
            return AwsApiError(
                f"{what}: AWS refused {action} ({code}: {message}). Grant the principal Airflow "
                f"runs as the IAM permission {action!r} (see docs/onboarding.md for the full "
                "list), or fix the credentials of the AWS connection.",
                code,
            )
        return AwsApiError(
            f"{what}: AWS {action} failed with {code}: {message}. Check the catalog entry and "
            "the resource in the AWS console.",
            code,
        )
    if isinstance(exc, BotoConnectionError | ResponseParserError):
        return TransientBackendError(
            f"{what}: could not reach AWS for {action} ({exc}); retrying may help"
        )
    if isinstance(exc, NoCredentialsError | PartialCredentialsError):
        return BackendError(
            f"{what}: no AWS credentials for {action}. Set up the Airflow AWS connection the "
            "catalog names (connections.cloud) or boto3's standard credentials."
        )
    if isinstance(exc, NoRegionError):
        return BackendError(f"{what}: no AWS region for {action}; set the cluster's location")
    return BackendError(f"{what}: AWS {action} failed: {exc}")


# botocore data path (None: botocore's own) -> this process's loader of it
_LOADERS: dict[str | None, Loader] = {}
_LOADERS_LOCK = threading.Lock()


def share_model_reads(session: boto3.session.Session) -> boto3.session.Session:
    """``session`` reads service models and endpoints through this process's one loader for
    its data path (``AWS_DATA_PATH``), which botocore would otherwise give each session anew.
    botocore caches what a loader reads, so one session hands the same parsed models to all its
    clients; without sharing, every backend object (every task, every trigger that builds one)
    parsed ec2's model and the endpoints file again, megabytes of JSON. botocore treats the
    cached data as read-only; two threads reading at once at worst both parse it."""
    core = session._session
    data_path = core.get_config_variable("data_path")
    with _LOADERS_LOCK:
        loader = _LOADERS.get(data_path)
        if loader is None:
            loader = _LOADERS[data_path] = create_loader(data_path)
    core.register_component("data_loader", loader)
    return session


def _session(conn_id: str | None, region: str) -> boto3.session.Session:
    """A boto3 session from the Airflow AWS connection (amazon provider) or the standard chain."""
    try:
        from airflow.providers.amazon.aws.hooks.base_aws import AwsBaseHook
    except ImportError:
        log.debug("amazon provider not installed: boto3's standard credential chain")
        return boto3.session.Session(region_name=region)
    hook = AwsBaseHook(aws_conn_id=conn_id, client_type="eks", region_name=region)
    return hook.get_session(region_name=region)


class AwsClients:
    """The ec2, eks, fsx and sts clients of one region, created on first use.

    ``call(service, operation, what, **params)`` runs one API call (``operation`` as boto3
    spells the method, ``describe_vpcs``) and turns failures into ``BackendError`` /
    ``TransientBackendError`` naming ``what`` we were doing."""

    def __init__(
        self,
        region: str,
        conn_id: str | None = None,
        session_factory: Callable[[], boto3.session.Session] | None = None,
    ) -> None:
        self.region = region
        self.conn_id = conn_id
        self._session_factory = session_factory or (lambda: _session(conn_id, region))
        self._session: boto3.session.Session | None = None
        self._clients: dict[str, Any] = {}
        self.config = Config(
            region_name=region,
            retries={"total_max_attempts": 1, "mode": "standard"},
            connect_timeout=10,
            read_timeout=60,
            user_agent_extra="gpufleet",
        )

    @property
    def session(self) -> boto3.session.Session:
        if self._session is None:
            self._session = share_model_reads(self._session_factory())
        return self._session

    def client(self, service: str) -> Any:
        if service not in self._clients:
            self._clients[service] = self.session.client(
                service, region_name=self.region, config=self.config
            )
        return self._clients[service]

    def call(self, service: str, operation: str, what: str, **params: Any) -> dict[str, Any]:
        client = self.client(service)
        try:
            return getattr(client, operation)(**params)
        except (ClientError, BotoCoreError, ResponseParserError) as exc:
            op_name = client.meta.method_to_api_mapping.get(operation, operation)
            raise translate(exc, service, op_name, what) from exc

    def pages(
        self, service: str, operation: str, key: str, what: str, **params: Any
    ) -> list[dict[str, Any]]:
        """Every item under ``key`` across the pages of a paginated call."""
        client = self.client(service)
        items: list[dict[str, Any]] = []
        try:
            for page in client.get_paginator(operation).paginate(**params):
                items.extend(page.get(key, []))
        except (ClientError, BotoCoreError, ResponseParserError) as exc:
            op_name = client.meta.method_to_api_mapping.get(operation, operation)
            raise translate(exc, service, op_name, what) from exc
        return items


def console_url(region: str, path: str) -> str:
    """A link into the AWS console for this region (``path`` after the host)."""
    if region.startswith("cn-"):
        host = "console.amazonaws.cn"
    elif region.startswith("us-gov-"):
        host = "console.amazonaws-us-gov.com"
    else:
        host = f"{region}.console.aws.amazon.com"
    return f"https://{host}/{path}"


def tag(resource: dict[str, Any], key: str = "Name") -> str | None:
    """The value of one tag of an EC2/FSx resource (``Tags: [{Key, Value}]``)."""
    for item in resource.get("Tags") or ():
        if item.get("Key") == key:
            return item.get("Value")
    return None
