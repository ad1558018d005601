"""``gpufleet.cli.airflow_api`` against a real local HTTP server that answers as Airflow 3.3 does.

The answers below (error bodies, and the DAG, run and task instance bodies the
apache-airflow-client's typed models read) were captured from a live Airflow 3.3.2 api-server
(see test_trigger_live.py for the same cases end to end). No Airflow needed: fast, not marked
live. The last tests run the ``gpufleet trigger`` command itself against the fake server.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from gpufleet.cli import main
from gpufleet.cli.airflow_api import AirflowApi
from gpufleet.cli.airflow_http import (
    AirflowApiError,
    AirflowAuthError,
    AirflowForbidden,
    AirflowUnreachable,
    CrossOriginRedirect,
    DagNotFound,
    DagPaused,
    DagRunConflict,
    InvalidRequest,
    WaitTimeout,
    describe_validation_error,
)
from gpufleet.errors import GpufleetError

# (status, JSON body or raw str) or (status, body, extra response headers)
Reply = tuple[int, Any] | tuple[int, Any, dict[str, str]]

# -- answers as Airflow 3.3.2 gives them (captured; the client's models require these fields) --

_WHEN = "2026-11-30T08:28:07.299031Z"


def dag_body(dag_id: str = "d", is_paused: bool = False) -> dict[str, Any]:
    """``GET /api/v2/dags/{dag_id}``."""
    return {
        "dag_id": dag_id,
        "dag_display_name": dag_id,
        "is_paused": is_paused,
        "is_stale": False,
        "last_parsed_time": _WHEN,
        "bundle_name": "dags-folder",
        "relative_fileloc": f"{dag_id}.py",
        "fileloc": f"/opt/airflow/dags/{dag_id}.py",
        "timetable_description": "Never, external triggers only",
        "timetable_partitioned": False,
        "timetable_periodic": False,
        "tags": [{"name": "gpufleet", "dag_id": dag_id, "dag_display_name": dag_id}],
        "max_active_tasks": 16,
        "max_active_runs": 16,
        "max_consecutive_failed_dag_runs": 0,
        "has_task_concurrency_limits": False,
        "has_import_errors": False,
        "owners": ["gpufleet"],
        "is_backfillable": False,
        "file_token": "eyJidW5kbGVfbmFtZSI6ImRhZ3MtZm9sZGVyIn0.token",
    }


def run_body(
    dag_id: str = "d", run_id: str = "r", state: str = "queued", conf: Any = None
) -> dict[str, Any]:
    """A DagRun, as ``POST .../dagRuns`` and ``GET .../dagRuns/{run_id}`` answer it."""
    return {
        "dag_run_id": run_id,
        "dag_id": dag_id,
        "logical_date": None,
        "queued_at": _WHEN,
        "run_after": _WHEN,
        "run_type": "manual",
        "state": state,
        "triggered_by": "rest_api",
        "triggering_user_name": "ci",
        "conf": conf or {},
        "note": None,
        "dag_versions": [
            {
                "id": "01a22b90-fc42-7671-8c89-50d56a627969",
                "version_number": 1,
                "dag_id": dag_id,
                "bundle_name": "dags-folder",
                "created_at": _WHEN,
                "dag_display_name": dag_id,
            }
        ],
        "dag_display_name": dag_id,
    }


def ti_body(task_id: str, map_index: int = -1, state: str = "success") -> dict[str, Any]:
    """One item of ``GET .../taskInstances``."""
    return {
        "id": str(uuid.uuid4()),
        "task_id": task_id,
        "dag_id": "d",
        "dag_run_id": "r",
        "map_index": map_index,
        "run_after": _WHEN,
        "state": state,
        "try_number": 1,
        "max_tries": 0,
        "task_display_name": task_id,
        "dag_display_name": "d",
        "pool": "default_pool",
        "pool_slots": 1,
        "executor_config": "{}",
    }


@dataclass
class Seen:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: Any


@dataclass
class FakeAirflow:
    """Routes ``(METHOD, path)`` to a function of the request; records every request."""

    url: str = ""
    routes: dict[tuple[str, str], Callable[[Seen], Reply]] = field(default_factory=dict)
    seen: list[Seen] = field(default_factory=list)
    tokens: list[str] = field(default_factory=list)
    # set when the server stops: a route may hold its answer until then (a server too slow)
    stopping: threading.Event = field(default_factory=threading.Event)

    def route(self, method: str, path: str, reply: Callable[[Seen], Reply] | Reply) -> None:
        self.routes[(method, path)] = reply if callable(reply) else (lambda _req, r=reply: r)

    def issue_token(self, _req: Seen) -> Reply:
        token = f"token-{len(self.tokens) + 1}"
        self.tokens.append(token)
        return 201, {"access_token": token}

    def calls(self, method: str, path: str) -> list[Seen]:
        return [s for s in self.seen if s.method == method and s.path == path]


def _handler(fake: FakeAirflow) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as uvicorn does

        def _serve(self) -> None:
            parts = urlsplit(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body = json.loads(raw) if raw else None
            except ValueError:
                body = raw.decode()
            req = Seen(self.command, parts.path, parse_qs(parts.query), dict(self.headers), body)
            fake.seen.append(req)
            reply = fake.routes.get((self.command, parts.path))
            status, payload, *extra = reply(req) if reply else (404, {"detail": "Not Found"})
            data = payload.encode() if isinstance(payload, str) else json.dumps(payload).encode()
            self.send_response(status)
            ctype = "text/plain" if isinstance(payload, str) else "application/json"
            self.send_header("Content-Type", ctype)
            for name, value in (extra[0] if extra else {}).items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            # the client may have given up waiting (the timeout tests)
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                self.wfile.write(data)

        do_GET = do_POST = do_PATCH = _serve

        def log_message(self, *args: Any) -> None:
            pass

    return Handler


def _start_fake() -> Iterator[FakeAirflow]:
    fake = FakeAirflow()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(fake))
    fake.url = f"http://127.0.0.1:{server.server_address[1]}"
    fake.route("POST", "/auth/token", fake.issue_token)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield fake
    fake.stopping.set()
    server.shutdown()
    server.server_close()


@pytest.fixture
def fake() -> Iterator[FakeAirflow]:
    yield from _start_fake()


@pytest.fixture
def elsewhere() -> Iterator[FakeAirflow]:
    """A second server: same host, another port, so another origin."""
    yield from _start_fake()


def api_for(fake: FakeAirflow, **kwargs: Any) -> AirflowApi:
    return AirflowApi(fake.url + "/", "ci", "secret", **kwargs)


def authorized(fake: FakeAirflow, req: Seen) -> bool:
    return req.headers.get("Authorization") == f"Bearer {fake.tokens[-1]}"


# -- authentication --------------------------------------------------------------------------


def test_token_is_fetched_once_and_sent_as_bearer(fake: FakeAirflow) -> None:
    fake.route("GET", "/api/v2/dags/d", (200, dag_body("d")))
    api = api_for(fake)
    api.get_dag("d")
    api.get_dag("d")
    (login,) = fake.calls("POST", "/auth/token")
    assert login.body == {"username": "ci", "password": "secret"}
    assert [s.headers["Authorization"] for s in fake.calls("GET", "/api/v2/dags/d")] == [
        "Bearer token-1",
        "Bearer token-1",
    ]


def test_bad_credentials_name_user_url_and_fix(fake: FakeAirflow) -> None:
    fake.route("POST", "/auth/token", (401, {"detail": "Invalid credentials"}))
    with pytest.raises(AirflowAuthError) as err:
        api_for(fake).trigger("d", {})
    message = str(err.value)
    assert f"authentication failed for user 'ci' at {fake.url}:" in message
    assert "check --user/--password or GPUFLEET_AIRFLOW_PASSWORD" in message
    assert "Invalid credentials" in message
    assert err.value.status == 401
    assert isinstance(err.value, GpufleetError)
    assert not fake.calls("POST", "/api/v2/dags/d/dagRuns")


def test_expired_token_is_renewed_once(fake: FakeAirflow) -> None:
    fake.route(
        "GET",
        "/api/v2/dags/d",
        lambda req: (
            (200, dag_body("d"))
            if req.headers["Authorization"] == "Bearer token-2"
            else (401, {"detail": "Token Expired"})
        ),
    )
    api = api_for(fake)
    assert api.get_dag("d").dag_id == "d"
    assert fake.tokens == ["token-1", "token-2"]


def test_token_refused_twice_is_an_auth_error(fake: FakeAirflow) -> None:
    fake.route("GET", "/api/v2/dags/d", (401, {"detail": "Invalid JWT"}))
    with pytest.raises(AirflowAuthError, match="authentication failed for user 'ci'"):
        api_for(fake).get_dag("d")
    assert len(fake.tokens) == 2


def test_no_token_endpoint_means_not_airflow_3(fake: FakeAirflow) -> None:
    fake.routes.pop(("POST", "/auth/token"))
    with pytest.raises(AirflowApiError, match="is .* an Airflow 3 api-server"):
        api_for(fake).token()


def test_forbidden_names_user_and_action(fake: FakeAirflow) -> None:
    fake.route("POST", "/api/v2/dags/d/dagRuns", (403, {"detail": "Forbidden"}))
    with pytest.raises(AirflowForbidden, match="user 'ci' may not POST /api/v2/dags/d/dagRuns"):
        api_for(fake).trigger("d", {})


# -- trigger ---------------------------------------------------------------------------------


def test_trigger_sends_null_logical_date_conf_and_run_id(fake: FakeAirflow) -> None:
    fake.route(
        "POST",
        "/api/v2/dags/d/dagRuns",
        lambda req: (200, run_body("d", req.body["dag_run_id"], conf=req.body["conf"])),
    )
    run = api_for(fake).trigger("d", {"nodes": 2}, run_id="r1")
    (call,) = fake.calls("POST", "/api/v2/dags/d/dagRuns")
    assert call.body == {"logical_date": None, "conf": {"nodes": 2}, "dag_run_id": "r1"}
    assert run.dag_run_id == "r1"
    assert run.conf == {"nodes": 2}


def test_param_violation_names_the_conf_field(fake: FakeAirflow) -> None:
    detail = (
        "Invalid input for param nodes: 99 is greater than the maximum of 4\n\n"
        "Failed validating 'maximum' in schema:\n    {'type': 'integer', 'minimum': 1, "
        "'maximum': 4}\n\nOn instance:\n    99"
    )
    fake.route("POST", "/api/v2/dags/d/dagRuns", (400, {"detail": detail}))
    with pytest.raises(InvalidRequest) as err:
        api_for(fake).trigger("d", {"nodes": 99})
    assert str(err.value) == (
        "Airflow refused to trigger 'd' (400): conf.nodes: 99 is greater than the maximum of 4"
    )
    assert err.value.fields == ["conf.nodes"]


def test_pydantic_422_names_each_field(fake: FakeAirflow) -> None:
    detail = [
        {"type": "missing", "loc": ["body", "logical_date"], "msg": "Field required"},
        {"type": "extra_forbidden", "loc": ["body", "bogus"], "msg": "Extra inputs"},
        {"type": "dict_type", "loc": ["body", "conf"], "msg": "Input should be a valid dict"},
    ]
    fake.route("POST", "/api/v2/dags/d/dagRuns", (422, {"detail": detail}))
    with pytest.raises(InvalidRequest) as err:
        api_for(fake).trigger("d", {})
    assert err.value.status == 422
    assert err.value.fields == ["logical_date", "bogus", "conf"]
    assert "logical_date: required field is missing" in str(err.value)
    assert "bogus: unknown field" in str(err.value)
    assert "conf: Input should be a valid dict" in str(err.value)


def test_other_400s_keep_the_first_line(fake: FakeAirflow) -> None:
    fake.route(
        "POST",
        "/api/v2/dags/d/dagRuns",
        (400, {"detail": "Dag with dag_id: 'd' has import errors and cannot be triggered"}),
    )
    with pytest.raises(InvalidRequest, match="has import errors and cannot be triggered") as err:
        api_for(fake).trigger("d", {})
    assert err.value.fields == []


def test_unknown_dag(fake: FakeAirflow) -> None:
    fake.route(
        "POST", "/api/v2/dags/nope/dagRuns", (404, {"detail": "Dag with dag_id: 'nope' not found"})
    )
    with pytest.raises(DagNotFound, match=r"DAG 'nope' not found .*is it parsed\? is the name"):
        api_for(fake).trigger("nope", {})
    with pytest.raises(DagNotFound):
        api_for(fake).get_dag("nope")


def test_duplicate_run_id(fake: FakeAirflow) -> None:
    fake.route("POST", "/api/v2/dags/d/dagRuns", (409, {"detail": "exists"}))
    with pytest.raises(DagRunConflict, match="already has a run 'r1': pick another --run-id"):
        api_for(fake).trigger("d", {}, run_id="r1")


def test_server_error_with_a_non_json_body(fake: FakeAirflow) -> None:
    fake.route("POST", "/api/v2/dags/d/dagRuns", (500, "Internal Server Error\nstack..."))
    with pytest.raises(AirflowApiError) as err:
        api_for(fake).trigger("d", {})
    assert err.value.status == 500
    assert str(err.value) == (
        f"Airflow at {fake.url} answered 500 to POST /api/v2/dags/d/dagRuns: Internal Server Error"
    )


def test_ids_are_quoted_in_paths(fake: FakeAirflow) -> None:
    run_id = "manual__2026-01-01T00:00:00+00:00"
    fake.route(
        "GET",
        "/api/v2/dags/d/dagRuns/manual__2026-01-01T00%3A00%3A00%2B00%3A00",
        (200, run_body("d", run_id, "success")),
    )
    api = api_for(fake)
    assert api.get_run("d", run_id).state == "success"
    assert api.run_link("d", run_id) == (
        f"{fake.url}/dags/d/runs/manual__2026-01-01T00%3A00%3A00%2B00%3A00"
    )


# -- paused DAGs -----------------------------------------------------------------------------


def test_paused_dag_is_refused_without_unpause(fake: FakeAirflow) -> None:
    fake.route("GET", "/api/v2/dags/d", (200, dag_body("d", is_paused=True)))
    with pytest.raises(DagPaused, match="DAG 'd' is paused .*pass --unpause"):
        api_for(fake).ensure_runnable("d")
    assert not fake.calls("PATCH", "/api/v2/dags/d")


def test_unpause_patches_is_paused(fake: FakeAirflow) -> None:
    fake.route("GET", "/api/v2/dags/d", (200, dag_body("d", is_paused=True)))
    fake.route("PATCH", "/api/v2/dags/d", lambda req: (200, dag_body("d", **req.body)))
    assert api_for(fake).ensure_runnable("d", unpause=True) is True
    (patch,) = fake.calls("PATCH", "/api/v2/dags/d")
    assert patch.body == {"is_paused": False}


# -- waiting and reporting -------------------------------------------------------------------


def test_wait_reports_each_state_change_until_terminal(fake: FakeAirflow) -> None:
    states = iter(["queued", "queued", "running", "running", "failed"])
    fake.route("GET", "/api/v2/dags/d/dagRuns/r", lambda _req: (200, run_body(state=next(states))))
    changes: list[tuple[str | None, str]] = []
    run = api_for(fake).wait(
        "d", "r", timeout=10, poll=0.01, on_change=lambda o, n, _r: changes.append((o, n))
    )
    assert run.state == "failed"
    assert changes == [(None, "queued"), ("queued", "running"), ("running", "failed")]


def test_wait_rides_out_a_restarting_api_server(fake: FakeAirflow) -> None:
    replies = iter(
        [(503, "Service Unavailable"), (502, "Bad Gateway"), (200, run_body(state="success"))]
    )
    fake.route("GET", "/api/v2/dags/d/dagRuns/r", lambda _req: next(replies))
    assert api_for(fake).wait("d", "r", timeout=10, poll=0.01).state == "success"


def test_wait_stops_on_a_lasting_server_error(fake: FakeAirflow) -> None:
    fake.route("GET", "/api/v2/dags/d/dagRuns/r", (500, {"detail": "boom"}))
    with pytest.raises(AirflowApiError, match="answered 500 .*: boom"):
        api_for(fake).wait("d", "r", timeout=10, poll=0.01, max_blips=2)
    assert len(fake.calls("GET", "/api/v2/dags/d/dagRuns/r")) == 3


def test_wait_does_not_retry_a_missing_run(fake: FakeAirflow) -> None:
    with pytest.raises(AirflowApiError, match="DAG 'd' has no run 'r'"):
        api_for(fake).wait("d", "r", timeout=10, poll=0.01)
    assert len(fake.calls("GET", "/api/v2/dags/d/dagRuns/r")) == 1


def test_wait_gives_up_after_timeout(fake: FakeAirflow) -> None:
    fake.route("GET", "/api/v2/dags/d/dagRuns/r", (200, run_body(state="running")))
    began = time.monotonic()
    with pytest.raises(WaitTimeout, match="'r' of DAG 'd' is still running after 0.3s") as err:
        api_for(fake).wait("d", "r", timeout=0.3, poll=0.05)
    assert 0.3 <= time.monotonic() - began < 3
    assert err.value.run.state == "running"


def test_failed_tasks_reads_every_page(fake: FakeAirflow) -> None:
    tis = [ti_body(f"t{i}") for i in range(150)]
    tis[7]["state"] = "failed"
    tis[120] = ti_body("pair", map_index=3, state="failed")
    tis[149] = ti_body("report", state="upstream_failed")

    def page(req: Seen) -> Reply:
        offset, limit = int(req.query["offset"][0]), int(req.query["limit"][0])
        return 200, {"task_instances": tis[offset : offset + limit], "total_entries": len(tis)}

    fake.route("GET", "/api/v2/dags/d/dagRuns/r/taskInstances", page)
    failed = api_for(fake).failed_tasks("d", "r")
    assert failed == ["t7", "pair[3]", "report (upstream_failed)"]
    assert len(fake.calls("GET", "/api/v2/dags/d/dagRuns/r/taskInstances")) == 2


# -- credentials stay with their server ----------------------------------------------------


def test_token_request_is_not_redirected_to_another_origin(
    fake: FakeAirflow, elsewhere: FakeAirflow
) -> None:
    # a 307 keeps method and body: following it would hand the password to the other server
    fake.route("POST", "/auth/token", (307, "", {"Location": f"{elsewhere.url}/auth/token"}))
    with pytest.raises(CrossOriginRedirect) as err:
        api_for(fake).token()
    assert str(err.value).startswith(
        f"Airflow at {fake.url} redirected POST /auth/token to {elsewhere.url}/auth/token: "
        "not following a redirect to another origin with credentials attached"
    )
    assert "--url" in str(err.value)
    assert elsewhere.seen == []


def test_api_call_is_not_redirected_to_another_origin(
    fake: FakeAirflow, elsewhere: FakeAirflow
) -> None:
    elsewhere.route("GET", "/api/v2/dags/d", (200, dag_body("d")))
    location = f"http://spy:hunter2@127.0.0.1:{elsewhere.url.rsplit(':', 1)[1]}/api/v2/dags/d"
    fake.route("GET", "/api/v2/dags/d", (302, "", {"Location": location}))
    with pytest.raises(CrossOriginRedirect, match="redirected GET /api/v2/dags/d to ") as err:
        api_for(fake).get_dag("d")
    assert f"to {elsewhere.url}/api/v2/dags/d:" in str(err.value)
    assert "hunter2" not in str(err.value)
    assert elsewhere.seen == []


# urllib3 follows the 307 (poolmanager.urlopen) and leaves a socket of the exchange to the
# garbage collector, which warns (ResourceWarning, reported by pytest as unraisable). Not traced
# further yet; this test alone is let off, by the warning's text.
@pytest.mark.filterwarnings(
    "ignore:Exception ignored in. <socket.socket:pytest.PytestUnraisableExceptionWarning"
)
def test_same_origin_redirect_is_followed_with_the_token(fake: FakeAirflow) -> None:
    fake.route("GET", "/api/v2/dags/d", (307, "", {"Location": "/api/v2/dags/moved"}))
    fake.route("GET", "/api/v2/dags/moved", (200, dag_body("moved")))
    assert api_for(fake).get_dag("d").dag_id == "moved"
    (moved,) = fake.calls("GET", "/api/v2/dags/moved")
    assert moved.headers["Authorization"] == "Bearer token-1"


def test_user_info_in_the_url_is_neither_sent_nor_shown(fake: FakeAirflow) -> None:
    fake.route("GET", "/api/v2/dags/d", (200, dag_body("d")))
    with_userinfo = fake.url.replace("http://", "http://ci:hunter2@")
    api = AirflowApi(with_userinfo, "ci", "secret")
    assert api.get_dag("d").dag_id == "d"
    assert api.url == fake.url
    assert api.run_link("d", "r") == f"{fake.url}/dags/d/runs/r"
    assert all("Basic" not in s.headers.get("Authorization", "") for s in fake.seen)
    with pytest.raises(DagNotFound) as err:
        api.get_dag("nope")
    assert f"not found at {fake.url} " in str(err.value)
    assert "hunter2" not in str(err.value)


def test_unreachable_url_is_shown_without_user_info() -> None:
    url = f"http://ci:hunter2@127.0.0.1:{_closed_port()}"
    with pytest.raises(AirflowUnreachable) as err:
        AirflowApi(url, "ci", "x", timeout=5).token()
    assert str(err.value).startswith(f"cannot reach Airflow at {url.replace('ci:hunter2@', '')}:")
    assert "hunter2" not in str(err.value)


def test_an_answer_the_client_cannot_read_is_one_line(fake: FakeAirflow) -> None:
    # e.g. a login page of a proxy in front of the URL, answering 200 with HTML
    fake.route("GET", "/api/v2/dags/d", (200, "<html><body>Sign in</body></html>"))
    with pytest.raises(AirflowApiError) as err:
        api_for(fake).get_dag("d")
    message = str(err.value)
    assert message.startswith(
        f"Airflow at {fake.url} answered GET /api/v2/dags/d with a body the API client cannot read"
    )
    assert message.endswith(f"is {fake.url} an Airflow 3.3 api-server?")
    assert len(message.splitlines()) == 1


# -- reaching the server ---------------------------------------------------------------------


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_connection_refused() -> None:
    url = f"http://127.0.0.1:{_closed_port()}"
    with pytest.raises(AirflowUnreachable) as err:
        AirflowApi(url, "ci", "x", timeout=5).token()
    assert str(err.value).startswith(f"cannot reach Airflow at {url}: is the api-server running")
    assert "Connection refused" in str(err.value)


def test_slow_server_times_out(fake: FakeAirflow) -> None:
    # answers only once the test is over, long after the client's 0.2 s
    fake.route("POST", "/auth/token", lambda _req: (fake.stopping.wait(30), (201, {}))[1])
    with pytest.raises(AirflowUnreachable, match="did not answer POST /auth/token within 0.2s"):
        api_for(fake, timeout=0.2).token()


def test_describe_validation_error_shapes() -> None:
    assert describe_validation_error("") == ("invalid request", [])
    assert describe_validation_error(["odd"]) == ("odd", [])
    assert describe_validation_error([{"loc": ["query", "limit"], "msg": "too big"}]) == (
        "limit: too big",
        ["limit"],
    )


# -- the command against the fake server -----------------------------------------------------


def trigger_cli(capsys: pytest.CaptureFixture[str], url: str, *args: str) -> tuple[int, str, str]:
    code = main(["trigger", *args, "--url", url, "--user", "ci", "--password", "secret"])
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_prints_no_user_info_and_exits_1_on_a_failed_run(
    fake: FakeAirflow, capsys: pytest.CaptureFixture[str]
) -> None:
    fake.route("GET", "/api/v2/dags/d", (200, dag_body("d")))
    fake.route("POST", "/api/v2/dags/d/dagRuns", (200, run_body("d", "r", "queued")))
    fake.route("GET", "/api/v2/dags/d/dagRuns/r", (200, run_body("d", "r", "failed")))
    fake.route(
        "GET",
        "/api/v2/dags/d/dagRuns/r/taskInstances",
        (200, {"task_instances": [ti_body("probe", state="failed")], "total_entries": 1}),
    )
    url = fake.url.replace("http://", "http://ci:hunter2@")
    code, out, err = trigger_cli(capsys, url, "d", "--wait", "--poll", "0.01")
    assert code == 1
    assert f"url: {fake.url}/dags/d/runs/r" in out.splitlines()
    assert "failed_tasks: probe" in out.splitlines()
    assert "hunter2" not in out + err


def test_cli_exits_2_on_a_refused_redirect(
    fake: FakeAirflow, elsewhere: FakeAirflow, capsys: pytest.CaptureFixture[str]
) -> None:
    fake.route("POST", "/auth/token", (308, "", {"Location": f"{elsewhere.url}/auth/token"}))
    code, out, err = trigger_cli(capsys, fake.url, "d")
    assert code == 2
    assert out == ""
    assert err.startswith(f"gpufleet: Airflow at {fake.url} redirected POST /auth/token")
    assert len(err.strip().splitlines()) == 1
    assert elsewhere.seen == []
