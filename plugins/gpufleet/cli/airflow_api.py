"""A small client for Airflow 3's REST API (``/api/v2``), as CI uses it to trigger DAG runs.

Authentication is a JWT from ``POST /auth/token`` (SimpleAuthManager and FAB both serve it).
Every failure is raised as an :class:`AirflowApiError` whose message says what was wrong and
what to do, so the CLI can print it as is. No Airflow import: this runs wherever ``requests``
does (a CI runner, a laptop).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import quote

import requests
from requests.adapters import HTTPAdapter
from urllib3.util.retry import Retry

from gpufleet.errors import GpufleetError

#: DagRun states after which nothing changes any more.
TERMINAL_STATES = frozenset({"success", "failed"})
#: TaskInstance states that count as "this task failed" in a report.
FAILED_TASK_STATES = frozenset({"failed", "upstream_failed"})

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


class InvalidRequest(AirflowApiError):
    """400/422: the API rejected the body; ``fields`` names what was wrong."""

    def __init__(self, message: str, status: int | None, fields: list[str]) -> None:
        super().__init__(message, status)
        self.fields = fields


class WaitTimeout(AirflowApiError):
    """The run did not reach a terminal state in time."""

    def __init__(self, message: str, run: dict[str, Any]) -> None:
        super().__init__(message)
        self.run = run


def _detail(response: requests.Response) -> Any:
    """The ``detail`` of an error response (FastAPI style), else the body text."""
    try:
        body = response.json()
    except ValueError:
        return response.text.strip() or response.reason
    if isinstance(body, dict) and "detail" in body:
        return body["detail"]
    return body


def _field_name(loc: Iterable[Any]) -> str:
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
            field = _field_name(item.get("loc") or ())
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


class AirflowApi:
    """Talk to one Airflow API server as one user.

    ``url`` is the API server's base URL (``http://localhost:8080``); the token is fetched on
    first use and fetched again once if the server says it expired.
    """

    def __init__(
        self,
        url: str,
        username: str,
        password: str,
        timeout: float = 30.0,
        session: requests.Session | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self.username = username
        self.password = password
        self.timeout = timeout
        self._session = session or _session_with_retries()
        self._token: str | None = None

    # -- plumbing ---------------------------------------------------------------------------

    def _send(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        kwargs.setdefault("timeout", self.timeout)
        try:
            return self._session.request(method, self.url + path, **kwargs)
        except requests.exceptions.Timeout as exc:
            raise AirflowUnreachable(
                f"Airflow at {self.url} did not answer {method} {path} within "
                f"{self.timeout:g}s: is the api-server overloaded or the URL wrong?"
            ) from exc
        except requests.exceptions.ConnectionError as exc:
            raise AirflowUnreachable(
                f"cannot reach Airflow at {self.url}: is the api-server running and is "
                f"--url / GPUFLEET_AIRFLOW_URL right? ({_root_cause(exc)})"
            ) from exc
        except requests.exceptions.RequestException as exc:
            raise AirflowUnreachable(f"cannot talk to Airflow at {self.url}: {exc}") from exc

    def token(self) -> str:
        """A JWT for this user from ``POST /auth/token`` (cached)."""
        if self._token:
            return self._token
        response = self._send(
            "POST", "/auth/token", json={"username": self.username, "password": self.password}
        )
        if response.status_code in (200, 201):
            try:
                self._token = str(response.json()["access_token"])
            except (ValueError, KeyError, TypeError) as exc:
                raise AirflowApiError(
                    f"Airflow at {self.url} answered /auth/token without an access_token: "
                    "is this an Airflow 3 api-server?",
                    response.status_code,
                ) from exc
            return self._token
        if response.status_code in (400, 401, 403):
            raise self._auth_failed(response)
        if response.status_code == 404:
            raise AirflowApiError(
                f"{self.url}/auth/token does not exist: is {self.url} an Airflow 3 api-server "
                "(Airflow 2's webserver has no token endpoint)?",
                404,
            )
        raise self._unexpected("POST", "/auth/token", response)

    def _auth_failed(self, response: requests.Response) -> AirflowAuthError:
        return AirflowAuthError(
            f"authentication failed for user {self.username!r} at {self.url}: "
            "check --user/--password or GPUFLEET_AIRFLOW_PASSWORD "
            f"(Airflow said: {_one_line(_detail(response))})",
            response.status_code,
        )

    def _unexpected(self, method: str, path: str, response: requests.Response) -> AirflowApiError:
        return AirflowApiError(
            f"Airflow at {self.url} answered {response.status_code} to {method} {path}: "
            f"{_one_line(_detail(response))}",
            response.status_code,
        )

    def _call(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        """An authenticated API call; 401 (expired token) is retried once with a new token."""
        for attempt in range(2):
            headers = {"Authorization": f"Bearer {self.token()}", "Accept": "application/json"}
            response = self._send(method, path, headers=headers, **kwargs)
            if response.status_code == 401 and attempt == 0:
                self._token = None
                continue
            break
        if response.status_code == 401:
            raise self._auth_failed(response)
        if response.status_code == 403:
            raise AirflowForbidden(
                f"user {self.username!r} may not {method} {path} at {self.url}: give the user a "
                f"role that allows it (Airflow said: {_one_line(_detail(response))})",
                403,
            )
        return response

    def _json(self, response: requests.Response) -> Any:
        try:
            return response.json()
        except ValueError as exc:
            raise AirflowApiError(
                f"Airflow at {self.url} answered {response.status_code} with a body that is not "
                f"JSON: {response.text[:200]!r}",
                response.status_code,
            ) from exc

    @staticmethod
    def _dag_path(dag_id: str) -> str:
        return f"/api/v2/dags/{quote(dag_id, safe='')}"

    @classmethod
    def _run_path(cls, dag_id: str, run_id: str) -> str:
        return f"{cls._dag_path(dag_id)}/dagRuns/{quote(run_id, safe='')}"

    def _dag_not_found(self, dag_id: str) -> DagNotFound:
        return DagNotFound(
            f"DAG {dag_id!r} not found at {self.url} (is it parsed? is the name right? "
            "check the DAG list in the UI and the dag-processor's import errors)",
            404,
        )

    # -- the API ----------------------------------------------------------------------------

    def run_link(self, dag_id: str, run_id: str) -> str:
        """The UI page of one run."""
        return f"{self.url}/dags/{quote(dag_id, safe='')}/runs/{quote(run_id, safe='')}"

    def get_dag(self, dag_id: str) -> dict[str, Any]:
        """``GET /api/v2/dags/{dag_id}``; :class:`DagNotFound` for an unknown DAG."""
        path = self._dag_path(dag_id)
        response = self._call("GET", path)
        if response.status_code == 404:
            raise self._dag_not_found(dag_id)
        if response.status_code != 200:
            raise self._unexpected("GET", path, response)
        return self._json(response)

    def set_paused(self, dag_id: str, paused: bool) -> dict[str, Any]:
        """``PATCH /api/v2/dags/{dag_id}`` with ``{"is_paused": paused}``."""
        path = self._dag_path(dag_id)
        response = self._call("PATCH", path, json={"is_paused": paused})
        if response.status_code == 404:
            raise self._dag_not_found(dag_id)
        if response.status_code != 200:
            raise self._unexpected("PATCH", path, response)
        return self._json(response)

    def unpause(self, dag_id: str) -> dict[str, Any]:
        return self.set_paused(dag_id, False)

    def ensure_runnable(self, dag_id: str, unpause: bool = False) -> bool:
        """Check the DAG exists and is not paused; unpause it if asked. True if it was unpaused.

        Airflow accepts a trigger for a paused DAG but never schedules the run, so a CI job
        waiting on it would hang: refuse instead, with the fix in the message.
        """
        dag = self.get_dag(dag_id)
        if not dag.get("is_paused"):
            return False
        if not unpause:
            raise DagPaused(
                f"DAG {dag_id!r} is paused at {self.url}: its runs would never start; "
                "unpause it in the UI or pass --unpause"
            )
        self.unpause(dag_id)
        return True

    def trigger(
        self,
        dag_id: str,
        conf: dict[str, Any] | None = None,
        run_id: str | None = None,
        note: str | None = None,
    ) -> dict[str, Any]:
        """``POST /api/v2/dags/{dag_id}/dagRuns``; returns the DagRun (``dag_run_id``, ...)."""
        path = f"{self._dag_path(dag_id)}/dagRuns"
        body: dict[str, Any] = {"logical_date": None, "conf": conf or {}}
        if run_id:
            body["dag_run_id"] = run_id
        if note:
            body["note"] = note
        response = self._call("POST", path, json=body)
        if response.status_code in (200, 201):
            return self._json(response)
        detail = _detail(response)
        if response.status_code == 404:
            raise self._dag_not_found(dag_id)
        if response.status_code == 409:
            raise DagRunConflict(
                f"DAG {dag_id!r} already has a run {run_id!r}: pick another --run-id",
                409,
            )
        if response.status_code in (400, 422):
            message, fields = describe_validation_error(detail)
            raise InvalidRequest(
                f"Airflow refused to trigger {dag_id!r} ({response.status_code}): {message}",
                response.status_code,
                fields,
            )
        raise self._unexpected("POST", path, response)

    def get_run(self, dag_id: str, run_id: str) -> dict[str, Any]:
        """``GET /api/v2/dags/{dag_id}/dagRuns/{run_id}``."""
        path = self._run_path(dag_id, run_id)
        response = self._call("GET", path)
        if response.status_code == 404:
            raise DagRunNotFound(
                f"DAG {dag_id!r} has no run {run_id!r} at {self.url} (or the DAG is unknown)",
                404,
            )
        if response.status_code != 200:
            raise self._unexpected("GET", path, response)
        return self._json(response)

    def wait(
        self,
        dag_id: str,
        run_id: str,
        timeout: float = 3600.0,
        poll: float = 5.0,
        on_change: Callable[[str | None, str, dict[str, Any]], None] | None = None,
        max_blips: int = 5,
    ) -> dict[str, Any]:
        """Poll the run until it is success or failed; returns the final DagRun.

        ``on_change(old_state, new_state, run)`` is called whenever the state changes (and
        once for the first state seen). Raises :class:`WaitTimeout` after ``timeout`` seconds.
        Up to ``max_blips`` consecutive transient failures (unreachable, 5xx) are ridden out,
        so an api-server restart during a long wait does not fail the CI job.
        """
        deadline = time.monotonic() + timeout
        state: str | None = None
        blips = 0
        while True:
            try:
                run = self.get_run(dag_id, run_id)
            except AirflowApiError as exc:
                transient = isinstance(exc, AirflowUnreachable) or (exc.status or 0) >= 500
                blips += 1
                if not transient or blips > max_blips or time.monotonic() >= deadline:
                    raise
                time.sleep(max(0.0, min(poll, deadline - time.monotonic())))
                continue
            blips = 0
            new_state = str(run.get("state"))
            if new_state != state:
                if on_change:
                    on_change(state, new_state, run)
                state = new_state
            if new_state in TERMINAL_STATES:
                return run
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise WaitTimeout(
                    f"run {run_id!r} of DAG {dag_id!r} is still {new_state} after "
                    f"{timeout:g}s; see {self.run_link(dag_id, run_id)}",
                    run,
                )
            time.sleep(min(poll, remaining))

    def task_instances(self, dag_id: str, run_id: str) -> list[dict[str, Any]]:
        """Every task instance of a run (all pages)."""
        path = f"{self._run_path(dag_id, run_id)}/taskInstances"
        found: list[dict[str, Any]] = []
        limit = 100
        while True:
            response = self._call("GET", path, params={"limit": limit, "offset": len(found)})
            if response.status_code == 404:
                raise DagRunNotFound(f"DAG {dag_id!r} has no run {run_id!r} at {self.url}", 404)
            if response.status_code != 200:
                raise self._unexpected("GET", path, response)
            page = self._json(response)
            items = page.get("task_instances") or []
            found.extend(items)
            total = int(page.get("total_entries") or 0)
            if not items or len(found) >= total:
                return found

    def failed_tasks(self, dag_id: str, run_id: str) -> list[str]:
        """Ids of the failed (and upstream-failed) tasks of a run, ``task[3]`` for mapped ones."""
        names = []
        for ti in self.task_instances(dag_id, run_id):
            if ti.get("state") not in FAILED_TASK_STATES:
                continue
            name = str(ti.get("task_id"))
            map_index = ti.get("map_index")
            if isinstance(map_index, int) and map_index >= 0:
                name += f"[{map_index}]"
            if ti.get("state") == "upstream_failed":
                name += " (upstream_failed)"
            names.append(name)
        return names


def _session_with_retries() -> requests.Session:
    """A session that retries failed connects (any method) and dropped reads (GET/PATCH only)."""
    retry = Retry(
        total=2,
        connect=2,
        read=2,
        status=0,
        redirect=0,
        other=0,
        backoff_factor=0.3,
        allowed_methods=frozenset({"GET", "PATCH"}),
        raise_on_status=False,
    )
    session = requests.Session()
    adapter = HTTPAdapter(max_retries=retry)
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session


def _one_line(detail: Any) -> str:
    if isinstance(detail, list):
        return describe_validation_error(detail)[0]
    text = str(detail).strip()
    return text.splitlines()[0] if text else "(no detail)"


def _root_cause(exc: BaseException) -> str:
    """The innermost reason of a requests ConnectionError, e.g. ``Connection refused``."""
    match = re.search(r"\[Errno -?\d+\] ([^'\")\]]+)", str(exc))
    if match:
        return match.group(1).strip()
    return str(exc)[:200]
