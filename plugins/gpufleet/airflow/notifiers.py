"""Alerts through an Airflow notifier: always to the log; to Slack or a webhook when the
``gpufleet_alerts`` connection exists (type http; **password** = the webhook URL; extra
``{"format": "slack"}`` for a Slack incoming webhook, else a JSON document is posted).

A webhook URL is a secret (a Slack incoming webhook's path is its credential). It lives in the
connection's password, which Airflow masks in every log the moment the connection is read, so
nothing here masks it by hand; a failed delivery is logged with the webhook's host and port
and the kind of failure only, never the URL or the requests error text (which quotes the URL).
A connection that names its webhook elsewhere (the host field, as before) delivers nothing and
says where the URL belongs; the alert itself is still logged.
"""

from __future__ import annotations

import json
import logging
from urllib.parse import urlsplit

from airflow.sdk import BaseHook, BaseNotifier
from airflow.sdk.exceptions import AirflowNotFoundException

from gpufleet.domain.inputs import TEXT_LIMIT, clipped

log = logging.getLogger("gpufleet.alerts")

ALERTS_CONN_ID = "gpufleet_alerts"


class AlertConnectionError(ValueError):
    """The alerts connection names no usable webhook (said without echoing its fields)."""


def _webhook(conn) -> tuple[str, str]:
    """The webhook URL (the connection's password) and the body's format."""
    url = (conn.password or "").strip()
    if not url.startswith(("http://", "https://")):
        if conn.host:
            raise AlertConnectionError(
                f"the {conn.conn_id} connection's webhook URL belongs in its password field "
                "(Airflow masks it in logs), not in its host field"
            )
        raise AlertConnectionError(
            f"the {conn.conn_id} connection has no webhook URL: put the http(s) URL in its "
            "password field"
        )
    return url, (conn.extra_dejson or {}).get("format", "json")


def where_to(url: str) -> str:
    """``url``'s host and port only: no user info, path or query (they may hold the secret)."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or "?"
        return f"{host}:{parts.port}" if parts.port else host
    except ValueError:  # an unparsable URL (bad port): say nothing from it
        return "an unparsable webhook URL"


def failure(exc: Exception) -> str:
    """What went wrong delivering an alert, without the URL that requests' errors quote."""
    import requests

    response = getattr(exc, "response", None)
    if isinstance(exc, requests.HTTPError) and response is not None:
        return f"HTTP {response.status_code} {response.reason or ''}".rstrip()
    cause: BaseException | None = exc
    for _ in range(8):  # the OS error underneath, if any (connection refused, ...)
        if cause is None:
            break
        if isinstance(cause, OSError) and cause.strerror:
            return f"{type(exc).__name__}: {cause.strerror}"
        nxt = getattr(cause, "reason", None)
        if not isinstance(nxt, BaseException):
            nxt = next((a for a in cause.args if isinstance(a, BaseException)), None)
        cause = nxt or cause.__cause__ or cause.__context__
    return type(exc).__name__


class FleetAlertNotifier(BaseNotifier):
    """Alert on a failed gpufleet task: what failed, where, and why."""

    template_fields = ("summary",)

    def __init__(self, summary: str = "gpufleet alert", conn_id: str = ALERTS_CONN_ID):
        super().__init__()
        self.summary = summary
        self.conn_id = conn_id

    def message(self, context) -> dict:
        ti = context.get("task_instance") or context.get("ti")
        exc = context.get("exception")
        dag_id = getattr(ti, "dag_id", None) or getattr(context.get("dag"), "dag_id", "?")
        task = getattr(ti, "task_id", "?")
        map_index = getattr(ti, "map_index", -1)
        where = f"{dag_id}.{task}" + (f"[{map_index}]" if map_index not in (-1, None) else "")
        return {
            "summary": self.summary,
            "where": where,
            "run_id": context.get("run_id"),
            "error": str(exc) if exc else None,
        }

    @staticmethod
    def capped(msg: dict) -> dict:
        """``msg`` with each field cut to what an alert should carry: a hostile or pasted value
        (a 10,000-character name in an error) is not echoed whole into logs and webhooks."""
        limits = {"summary": 200, "where": 200, "run_id": 250}
        return {
            k: clipped(v, limits.get(k, TEXT_LIMIT)) if isinstance(v, str) else v
            for k, v in msg.items()
        }

    def notify(self, context) -> None:
        self.deliver(self.message(context))

    def deliver(self, msg: dict) -> None:
        """Log the alert (the alert of record) and post it to the alerts webhook, if any."""
        msg = self.capped(msg)
        text = f"{msg['summary']}: {msg['where']} ({msg['run_id']}): {msg['error'] or 'failed'}"
        log.error("ALERT %s", text)
        try:
            conn = BaseHook.get_connection(self.conn_id)
        except AirflowNotFoundException:
            return
        import requests  # imported here: DAG files import this module at parse time

        try:
            url, fmt = _webhook(conn)
        except AlertConnectionError as exc:
            log.error("could not deliver the alert: %s", exc)
            return
        body = {"text": text} if fmt == "slack" else msg
        try:
            resp = requests.post(
                url, data=json.dumps(body), headers={"Content-Type": "application/json"}, timeout=10
            )
            resp.raise_for_status()
        except requests.RequestException as exc:  # the log line above is the alert of record
            log.error("could not deliver the alert to %s: %s", where_to(url), failure(exc))


def send_alert(summary: str, where: str, text: str, run_id: str | None = None) -> None:
    """An alert from inside a running task (a drain still waiting for jobs, ...), delivered like
    a task failure's."""
    FleetAlertNotifier(summary=summary).deliver(
        {"summary": summary, "where": where, "run_id": run_id, "error": text}
    )
