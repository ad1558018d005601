"""The CLI's client for Airflow 3's REST API (``/api/v2``), as CI uses it to trigger DAG runs.

The calls go through the official ``apache-airflow-client`` (generated from the API's own
OpenAPI spec: typed bodies and answers). This module adds what that client leaves to its caller:

- the token: ``POST /auth/token`` (SimpleAuthManager and FAB both serve it) is not in the spec
  the client is generated from, so it is one plain call through the client's own transport
  (same TLS, proxy, retry and redirect rules); a token the server calls expired is renewed once;
- one-line errors (:mod:`gpufleet.cli.airflow_errors`) instead of the client's exceptions;
- credentials stay with their server: user info in the URL (``http://user:pass@host``) is
  neither sent nor shown, and a redirect to another origin is refused (every request carries
  the password or the token).

No Airflow import: ``airflow_client`` is a separate package from the server's ``airflow``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar
from urllib.parse import quote

from airflow_client.client import (
    ApiClient,
    Configuration,
    DAGApi,
    DAGPatchBody,
    DAGResponse,
    DagRunApi,
    DAGRunResponse,
    HITLDetail,
    HITLDetailResponse,
    TaskInstanceApi,
    TaskInstanceResponse,
    TriggerDAGRunPostBody,
    UpdateHITLDetailPayload,
)
from airflow_client.client import exceptions as client_errors
from pydantic import ValidationError
from urllib3 import exceptions as http_errors

from gpufleet.cli.airflow_http import (
    AirflowApiError,
    AirflowAuthError,
    AirflowForbidden,
    AirflowUnreachable,
    CrossOriginRedirect,
    DagNotFound,
    DagPaused,
    DagRunConflict,
    DagRunNotFound,
    InvalidRequest,
    Redirected,
    WaitTimeout,
    describe_validation_error,
    detail_of,
    field_name,
    one_line,
    retry_policy,
    root_cause,
    without_userinfo,
)

T = TypeVar("T")

#: DagRun states after which nothing changes any more.
TERMINAL_STATES = frozenset({"success", "failed"})
#: TaskInstance states that count as "this task failed" in a report.
FAILED_TASK_STATES = frozenset({"failed", "upstream_failed"})


# an answer with an HTTP status, turned into our error given the answer's detail
_OnStatus = Mapping[int, Callable[[Any], AirflowApiError]]


class AirflowApi:
    """Talk to one Airflow API server as one user.

    ``url`` is the API server's base URL (``http://localhost:8080``); the token is fetched on
    first use and fetched again once if the server says it expired.
    """

    def __init__(self, url: str, username: str, password: str, timeout: float = 30.0) -> None:
        self.url = without_userinfo(url).rstrip("/")
        self.username = username
        self.password = password
        self.timeout = timeout
        self._timeouts = (float(timeout), float(timeout))  # (connect, read), as requests does
        self._config = Configuration(host=self.url, retries=retry_policy())
        self._client = ApiClient(self._config)
        self._dags = DAGApi(self._client)
        self._runs = DagRunApi(self._client)
        self._task_instances = TaskInstanceApi(self._client)
        self._token: str | None = None

    # -- plumbing ---------------------------------------------------------------------------

    def _send(self, what: str, call: Callable[[], T]) -> T:
        """Run one HTTP exchange; an HTTP error status passes as the client's ApiException."""
        try:
            return call()
        except client_errors.ApiException as exc:
            if exc.status:
                raise
            raise self._unreachable(exc.reason) from exc  # the client's wrapper of TLS errors
        except Redirected as exc:
            raise CrossOriginRedirect(
                f"Airflow at {self.url} redirected {what} to {exc.target}: not following a "
                "redirect to another origin with credentials attached; if the API lives there, "
                "pass that address as --url / GPUFLEET_AIRFLOW_URL"
            ) from None
        except http_errors.HTTPError as exc:
            reason = exc.reason if isinstance(exc, http_errors.MaxRetryError) else exc
            # urllib3 2 files a refused connection under timeouts too
            if isinstance(reason, http_errors.TimeoutError) and not isinstance(
                reason, http_errors.NewConnectionError
            ):
                raise AirflowUnreachable(
                    f"Airflow at {self.url} did not answer {what} within {self.timeout:g}s: "
                    "is the api-server overloaded or the URL wrong?"
                ) from exc
            raise self._unreachable(reason or exc) from exc
        except ValidationError as exc:  # a 2xx answer the typed model rejects
            first: Mapping[str, Any] = exc.errors()[0] if exc.errors() else {}
            raise AirflowApiError(
                f"Airflow at {self.url} answered {what} with a body the API client cannot read "
                f"({field_name(first.get('loc') or ())}: {first.get('msg', '?')}): is "
                f"{self.url} an Airflow 3.3 api-server?"
            ) from exc

    def _unreachable(self, reason: object) -> AirflowUnreachable:
        return AirflowUnreachable(
            f"cannot reach Airflow at {self.url}: is the api-server running and is "
            f"--url / GPUFLEET_AIRFLOW_URL right? ({root_cause(reason)})"
        )

    def token(self) -> str:
        """A JWT for this user from ``POST /auth/token`` (cached)."""
        if self._token:
            return self._token

        def post() -> Any:
            response = self._client.call_api(
                "POST",
                f"{self.url}/auth/token",
                header_params={"Content-Type": "application/json", "Accept": "application/json"},
                body={"username": self.username, "password": self.password},
                _request_timeout=self._timeouts,
            )
            response.read()
            return response

        response = self._send("POST /auth/token", post)
        detail = detail_of(response.data, response.reason)
        if response.status in (200, 201):
            if isinstance(detail, dict) and detail.get("access_token"):
                self._token = str(detail["access_token"])
                return self._token
            raise AirflowApiError(
                f"Airflow at {self.url} answered /auth/token without an access_token: "
                "is this an Airflow 3 api-server?",
                response.status,
            )
        if response.status in (400, 401, 403):
            raise self._auth_failed(response.status, detail)
        if response.status == 404:
            raise AirflowApiError(
                f"{self.url}/auth/token does not exist: is {self.url} an Airflow 3 api-server "
                "(Airflow 2's webserver has no token endpoint)?",
                404,
            )
        raise self._unexpected("POST /auth/token", response.status, detail)

    def _auth_failed(self, status: int, detail: Any) -> AirflowAuthError:
        return AirflowAuthError(
            f"authentication failed for user {self.username!r} at {self.url}: "
            "check --user/--password or GPUFLEET_AIRFLOW_PASSWORD "
            f"(Airflow said: {one_line(detail)})",
            status,
        )

    def _unexpected(self, what: str, status: int, detail: Any) -> AirflowApiError:
        return AirflowApiError(
            f"Airflow at {self.url} answered {status} to {what}: {one_line(detail)}", status
        )

    def _call(self, what: str, call: Callable[[], T], on_status: _OnStatus | None = None) -> T:
        """An authenticated API call; 401 (expired token) is retried once with a new token.

        Any other HTTP error status becomes ``on_status[status](detail)`` if given, else a
        generic :class:`AirflowApiError` naming the status and Airflow's detail.
        """
        for attempt in (1, 2):
            self._config.access_token = self.token()
            try:
                return self._send(what, call)
            except client_errors.ApiException as exc:
                status, detail = int(exc.status), detail_of(exc.body, exc.reason)
                if status == 401 and attempt == 1:
                    self._token = None
                    continue
                if status == 401:
                    raise self._auth_failed(status, detail) from exc
                if status == 403:
                    raise AirflowForbidden(
                        f"user {self.username!r} may not {what} at {self.url}: give the user a "
                        f"role that allows it (Airflow said: {one_line(detail)})",
                        403,
                    ) from exc
                if on_status and status in on_status:
                    raise on_status[status](detail) from exc
                raise self._unexpected(what, status, detail) from exc
        raise AssertionError("unreachable")  # pragma: no cover

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

    def get_dag(self, dag_id: str) -> DAGResponse:
        """``GET /api/v2/dags/{dag_id}``; :class:`DagNotFound` for an unknown DAG."""
        return self._call(
            f"GET {self._dag_path(dag_id)}",
            lambda: self._dags.get_dag(dag_id, _request_timeout=self._timeouts),
            {404: lambda _detail: self._dag_not_found(dag_id)},
        )

    def set_paused(self, dag_id: str, paused: bool) -> DAGResponse:
        """``PATCH /api/v2/dags/{dag_id}`` with ``{"is_paused": paused}``."""
        return self._call(
            f"PATCH {self._dag_path(dag_id)}",
            lambda: self._dags.patch_dag(
                dag_id, DAGPatchBody(is_paused=paused), _request_timeout=self._timeouts
            ),
            {404: lambda _detail: self._dag_not_found(dag_id)},
        )

    def unpause(self, dag_id: str) -> DAGResponse:
        return self.set_paused(dag_id, False)

    def ensure_runnable(self, dag_id: str, unpause: bool = False) -> bool:
        """Check the DAG exists and is not paused; unpause it if asked. True if it was unpaused.

        Airflow accepts a trigger for a paused DAG but never schedules the run, so a CI job
        waiting on it would hang: refuse instead, with the fix in the message.
        """
        if not self.get_dag(dag_id).is_paused:
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
    ) -> DAGRunResponse:
        """``POST /api/v2/dags/{dag_id}/dagRuns`` (``logical_date`` null); returns the run."""
        body = TriggerDAGRunPostBody(conf=conf or {}, dag_run_id=run_id or None, note=note or None)

        def refused(status: int) -> Callable[[Any], AirflowApiError]:
            def error(detail: Any) -> AirflowApiError:
                message, fields = describe_validation_error(detail)
                return InvalidRequest(
                    f"Airflow refused to trigger {dag_id!r} ({status}): {message}", status, fields
                )

            return error

        return self._call(
            f"POST {self._dag_path(dag_id)}/dagRuns",
            lambda: self._runs.trigger_dag_run(dag_id, body, _request_timeout=self._timeouts),
            {
                404: lambda _detail: self._dag_not_found(dag_id),
                409: lambda _detail: DagRunConflict(
                    f"DAG {dag_id!r} already has a run {run_id!r}: pick another --run-id", 409
                ),
                400: refused(400),
                422: refused(422),
            },
        )

    def get_run(self, dag_id: str, run_id: str) -> DAGRunResponse:
        """``GET /api/v2/dags/{dag_id}/dagRuns/{run_id}``."""
        return self._call(
            f"GET {self._run_path(dag_id, run_id)}",
            lambda: self._runs.get_dag_run(dag_id, run_id, _request_timeout=self._timeouts),
            {
                404: lambda _detail: DagRunNotFound(
                    f"DAG {dag_id!r} has no run {run_id!r} at {self.url} (or the DAG is unknown)",
                    404,
                )
            },
        )

    def wait(
        self,
        dag_id: str,
        run_id: str,
        timeout: float = 3600.0,
        poll: float = 5.0,
        on_change: Callable[[str | None, str, DAGRunResponse], None] | None = None,
        max_blips: int = 5,
    ) -> DAGRunResponse:
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
            new_state = run.state.value
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

    def task_instances(self, dag_id: str, run_id: str) -> list[TaskInstanceResponse]:
        """Every task instance of a run (all pages)."""
        found: list[TaskInstanceResponse] = []
        limit = 100
        while True:
            page = self._call(
                f"GET {self._run_path(dag_id, run_id)}/taskInstances",
                lambda: self._task_instances.get_task_instances(
                    dag_id, run_id, limit=limit, offset=len(found), _request_timeout=self._timeouts
                ),
                {
                    404: lambda _detail: DagRunNotFound(
                        f"DAG {dag_id!r} has no run {run_id!r} at {self.url}", 404
                    )
                },
            )
            found.extend(page.task_instances)
            total = page.total_entries
            last = len(page.task_instances) < limit if total is None else len(found) >= total
            if not page.task_instances or last:
                return found

    def failed_tasks(self, dag_id: str, run_id: str) -> list[str]:
        """Ids of the failed (and upstream-failed) tasks of a run, ``task[3]`` for mapped ones."""
        names = []
        for ti in self.task_instances(dag_id, run_id):
            state = ti.state.value if ti.state else None
            if state not in FAILED_TASK_STATES:
                continue
            name = ti.task_id
            if ti.map_index >= 0:
                name += f"[{ti.map_index}]"
            if state == "upstream_failed":
                name += " (upstream_failed)"
            names.append(name)
        return names

    # -- human-in-the-loop (approval tasks) ---------------------------------------------------

    def _hitl_path(self, dag_id: str, run_id: str, task_id: str, map_index: int) -> str:
        return (
            f"{self._run_path(dag_id, run_id)}/taskInstances/{quote(task_id, safe='')}/"
            f"{map_index}/hitlDetails"
        )

    def _no_hitl(self, dag_id: str, run_id: str, task_id: str, map_index: int):
        def error(detail: Any) -> AirflowApiError:
            return DagRunNotFound(
                f"no approval task {task_id!r} (map index {map_index}) in run {run_id!r} of DAG "
                f"{dag_id!r} at {self.url} (Airflow said: {one_line(detail)}); is the task "
                "waiting for input yet? (state awaiting_input)",
                404,
            )

        return error

    def get_hitl(self, dag_id: str, run_id: str, task_id: str, map_index: int = -1) -> HITLDetail:
        """``GET .../taskInstances/{task_id}/{map_index}/hitlDetails``: the request and, once
        answered, the answer."""
        return self._call(
            f"GET {self._hitl_path(dag_id, run_id, task_id, map_index)}",
            lambda: self._task_instances.get_hitl_detail(
                dag_id, run_id, task_id, map_index, _request_timeout=self._timeouts
            ),
            {404: self._no_hitl(dag_id, run_id, task_id, map_index)},
        )

    def respond(  # noqa: PLR0913  the task instance and the answer
        self, dag_id: str, run_id: str, task_id: str, map_index: int, options: list[str]
    ) -> HITLDetailResponse:
        """``PATCH .../taskInstances/{task_id}/{map_index}/hitlDetails`` with
        ``{"chosen_options": options}``: answer a human-in-the-loop task as this user (Airflow
        records the user and the time, and resumes the task)."""
        body = UpdateHITLDetailPayload(chosen_options=options, params_input={})
        what = f"PATCH {self._hitl_path(dag_id, run_id, task_id, map_index)}"

        def refused(status: int) -> Callable[[Any], AirflowApiError]:
            def error(detail: Any) -> AirflowApiError:
                return InvalidRequest(
                    f"Airflow refused the answer to {task_id!r} ({status}): {one_line(detail)}",
                    status,
                    [],
                )

            return error

        return self._call(
            what,
            lambda: self._task_instances.update_hitl_detail(
                dag_id, run_id, task_id, map_index, body, _request_timeout=self._timeouts
            ),
            {
                404: self._no_hitl(dag_id, run_id, task_id, map_index),
                409: lambda _detail: DagRunConflict(
                    f"{task_id!r} of run {run_id!r} was answered already: an answer is given "
                    "once (see it with --show)",
                    409,
                ),
                400: refused(400),
                422: refused(422),
            },
        )
