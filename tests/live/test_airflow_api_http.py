"""``gpufleet.cli.airflow_api`` against a real local HTTP server that answers as Airflow 3.3 does.

The error bodies below were captured from a live Airflow 3.3.2 api-server (see
test_trigger_live.py for the same cases end to end). No Airflow needed: fast, not marked live.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from gpufleet.cli.airflow_api import (
    AirflowApi,
    AirflowApiError,
    AirflowAuthError,
    AirflowForbidden,
    AirflowUnreachable,
    DagNotFound,
    DagPaused,
    DagRunConflict,
    InvalidRequest,
    WaitTimeout,
    describe_validation_error,
)
from gpufleet.errors import GpufleetError

Reply = tuple[int, Any]  # (status, JSON body or raw str)


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
            status, payload = reply(req) if reply else (404, {"detail": "Not Found"})
            data = payload.encode() if isinstance(payload, str) else json.dumps(payload).encode()
            self.send_response(status)
            ctype = "text/plain" if isinstance(payload, str) else "application/json"
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PATCH = _serve

        def log_message(self, *args: Any) -> None:
            pass

    return Handler


@pytest.fixture
def fake() -> Iterator[FakeAirflow]:
    fake = FakeAirflow()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(fake))
    fake.url = f"http://127.0.0.1:{server.server_address[1]}"
    fake.route("POST", "/auth/token", fake.issue_token)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield fake
    server.shutdown()
    server.server_close()


def api_for(fake: FakeAirflow, **kwargs: Any) -> AirflowApi:
    return AirflowApi(fake.url + "/", "ci", "secret", **kwargs)


def authorized(fake: FakeAirflow, req: Seen) -> bool:
    return req.headers.get("Authorization") == f"Bearer {fake.tokens[-1]}"


# -- authentication --------------------------------------------------------------------------


def test_token_is_fetched_once_and_sent_as_bearer(fake: FakeAirflow) -> None:
    fake.route("GET", "/api/v2/dags/d", (200, {"dag_id": "d", "is_paused": False}))
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
            (200, {"is_paused": False})
            if req.headers["Authorization"] == "Bearer token-2"
            else (401, {"detail": "Token expired"})
        ),
    )
    api = api_for(fake)
    assert api.get_dag("d") == {"is_paused": False}
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
        "POST", "/api/v2/dags/d/dagRuns", lambda req: (200, {"dag_run_id": "r1", **req.body})
    )
    run = api_for(fake).trigger("d", {"nodes": 2}, run_id="r1")
    (call,) = fake.calls("POST", "/api/v2/dags/d/dagRuns")
    assert call.body == {"logical_date": None, "conf": {"nodes": 2}, "dag_run_id": "r1"}
    assert run["dag_run_id"] == "r1"


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
        (200, {"state": "success"}),
    )
    api = api_for(fake)
    assert api.get_run("d", run_id)["state"] == "success"
    assert api.run_link("d", run_id) == (
        f"{fake.url}/dags/d/runs/manual__2026-01-01T00%3A00%3A00%2B00%3A00"
    )


# -- paused DAGs -----------------------------------------------------------------------------


def test_paused_dag_is_refused_without_unpause(fake: FakeAirflow) -> None:
    fake.route("GET", "/api/v2/dags/d", (200, {"dag_id": "d", "is_paused": True}))
    with pytest.raises(DagPaused, match="DAG 'd' is paused .*pass --unpause"):
        api_for(fake).ensure_runnable("d")
    assert not fake.calls("PATCH", "/api/v2/dags/d")


def test_unpause_patches_is_paused(fake: FakeAirflow) -> None:
    fake.route("GET", "/api/v2/dags/d", (200, {"dag_id": "d", "is_paused": True}))
    fake.route("PATCH", "/api/v2/dags/d", lambda req: (200, {"dag_id": "d", **req.body}))
    assert api_for(fake).ensure_runnable("d", unpause=True) is True
    (patch,) = fake.calls("PATCH", "/api/v2/dags/d")
    assert patch.body == {"is_paused": False}


# -- waiting and reporting -------------------------------------------------------------------


def test_wait_reports_each_state_change_until_terminal(fake: FakeAirflow) -> None:
    states = iter(["queued", "queued", "running", "running", "failed"])
    fake.route("GET", "/api/v2/dags/d/dagRuns/r", lambda _req: (200, {"state": next(states)}))
    changes: list[tuple[str | None, str]] = []
    run = api_for(fake).wait(
        "d", "r", timeout=10, poll=0.01, on_change=lambda o, n, _r: changes.append((o, n))
    )
    assert run["state"] == "failed"
    assert changes == [(None, "queued"), ("queued", "running"), ("running", "failed")]


def test_wait_rides_out_a_restarting_api_server(fake: FakeAirflow) -> None:
    replies = iter(
        [(503, "Service Unavailable"), (502, "Bad Gateway"), (200, {"state": "success"})]
    )
    fake.route("GET", "/api/v2/dags/d/dagRuns/r", lambda _req: next(replies))
    assert api_for(fake).wait("d", "r", timeout=10, poll=0.01)["state"] == "success"


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
    fake.route("GET", "/api/v2/dags/d/dagRuns/r", (200, {"state": "running"}))
    began = time.monotonic()
    with pytest.raises(WaitTimeout, match="'r' of DAG 'd' is still running after 0.3s") as err:
        api_for(fake).wait("d", "r", timeout=0.3, poll=0.05)
    assert 0.3 <= time.monotonic() - began < 3
    assert err.value.run == {"state": "running"}


def test_failed_tasks_reads_every_page(fake: FakeAirflow) -> None:
    tis = [{"task_id": f"t{i}", "map_index": -1, "state": "success"} for i in range(150)]
    tis[7]["state"] = "failed"
    tis[120] = {"task_id": "pair", "map_index": 3, "state": "failed"}
    tis[149] = {"task_id": "report", "map_index": -1, "state": "upstream_failed"}

    def page(req: Seen) -> Reply:
        offset, limit = int(req.query["offset"][0]), int(req.query["limit"][0])
        return 200, {"task_instances": tis[offset : offset + limit], "total_entries": len(tis)}

    fake.route("GET", "/api/v2/dags/d/dagRuns/r/taskInstances", page)
    failed = api_for(fake).failed_tasks("d", "r")
    assert failed == ["t7", "pair[3]", "report (upstream_failed)"]
    assert len(fake.calls("GET", "/api/v2/dags/d/dagRuns/r/taskInstances")) == 2


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
    fake.route("POST", "/auth/token", lambda _req: (time.sleep(1.0), (201, {}))[1])
    with pytest.raises(AirflowUnreachable, match="did not answer POST /auth/token within 0.2s"):
        api_for(fake, timeout=0.2).token()


def test_describe_validation_error_shapes() -> None:
    assert describe_validation_error("") == ("invalid request", [])
    assert describe_validation_error(["odd"]) == ("odd", [])
    assert describe_validation_error([{"loc": ["query", "limit"], "msg": "too big"}]) == (
        "limit: too big",
        ["limit"],
    )
