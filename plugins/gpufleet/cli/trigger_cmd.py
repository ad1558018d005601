"""``gpufleet trigger``: start a DAG run through Airflow's REST API, as CI does; optionally wait.

stdout gets ``key: value`` lines a script can read (``run_id``, ``url``, ``state``,
``failed_tasks``); progress goes to stderr. Exit 0 when the run was created (or, with
``--wait``, succeeded), 1 when the awaited run failed, 2 for bad input or an API error.
The REST calls go through :mod:`gpufleet.cli.airflow_api` (the official apache-airflow-client
underneath); user info in ``--url`` is neither sent nor printed.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpufleet.cli.args import HOUR_S, add_airflow_args, airflow_password, bounded_float
from gpufleet.errors import GpufleetError

if TYPE_CHECKING:
    from airflow_client.client import DAGRunResponse

WEEK_S = 7 * 24 * 3600.0


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "trigger",
        help="trigger a DAG run through Airflow's REST API (for CI)",
        description=(
            "Trigger a DAG run through Airflow's REST API and print its run id and UI link. "
            "With --wait, follow it to the end: exit 0 on success, 1 if it failed (the failed "
            "tasks are listed), 2 for bad input or an API error."
        ),
    )
    parser.add_argument(
        "dag_id", metavar="DAG_ID", help="the DAG to trigger, e.g. gated_training_launch"
    )
    parser.add_argument(
        "--conf",
        default="{}",
        metavar="JSON|@FILE",
        help="the run's conf (the DAG's Params) as a JSON object, or @path to a JSON file",
    )
    parser.add_argument("--run-id", default=None, help="the run id (default: Airflow picks one)")
    parser.add_argument("--note", default=None, help="a note shown on the run in the UI")
    parser.add_argument("--wait", action="store_true", help="wait until the run succeeds or fails")
    parser.add_argument(
        "--timeout",
        type=bounded_float(0, WEEK_S, "a number of seconds"),
        default=3600.0,
        metavar="S",
        help="with --wait: give up after S seconds (exit 2; the run keeps going). Default 3600",
    )
    parser.add_argument(
        "--poll",
        type=bounded_float(0, HOUR_S, "a number of seconds"),
        default=5.0,
        metavar="S",
        help="with --wait: seconds between state checks. Default 5",
    )
    parser.add_argument(
        "--unpause", action="store_true", help="unpause the DAG if it is paused (else refuse)"
    )
    add_airflow_args(parser, "Airflow user")
    parser.set_defaults(func=run)


class _Refused(ValueError):
    """Valid-looking JSON that no DAG conf should hold."""


class _NonFinite:
    """A NaN or infinite number where the JSON held one: kept until the parse ends, so the
    refusal can name the Param it sits in (``conf.tolerance: NaN ...``)."""

    def __init__(self, text: str):
        self.text = text[:40]


def _non_finite(name: str) -> Any:
    return _NonFinite(name)


def _float(text: str) -> float | _NonFinite:
    value = float(text)
    return value if math.isfinite(value) else _NonFinite(text)  # 1e999 parses to inf


def _refuse_non_finite(value: Any, path: str = "conf") -> None:
    """Raise naming the first NaN or infinite number in ``value`` and where it is."""
    if isinstance(value, _NonFinite):
        raise _Refused(f"{path}: {value.text} is not a finite number (Params must be finite)")
    items = (
        value.items()
        if isinstance(value, dict)
        else enumerate(value)
        if isinstance(value, list)
        else ()
    )
    for key, item in items:
        _refuse_non_finite(
            item, f"{path}.{str(key)[:40]}" if isinstance(key, str) else f"{path}[{key}]"
        )


def _int(text: str) -> int:
    if len(text.lstrip("-")) > 64:
        raise _Refused(f"an integer of {len(text.lstrip('-'))} digits is no Param value")
    return int(text)


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _Refused(f"key {key[:40]!r} is given twice (JSON would keep only the last)")
        out[key] = value
    return out


def load_conf(text: str) -> dict[str, Any]:
    """Parse ``--conf``: a JSON object, or ``@path`` to a file holding one."""
    source = "--conf"
    if text.startswith("@"):
        path = Path(text[1:]).expanduser()
        source = f"--conf file {path}"
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise GpufleetError(f"cannot read {source}: {exc.strerror or exc}") from None
        except UnicodeDecodeError as exc:
            raise GpufleetError(f"{source} is not UTF-8 text (byte {exc.start})") from None
    try:
        conf = json.loads(
            text,
            parse_constant=_non_finite,
            object_pairs_hook=_unique_keys,
            parse_int=_int,
            parse_float=_float,
        )
    except json.JSONDecodeError as exc:
        raise GpufleetError(
            f"{source} is not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno}); "
            """pass an object such as '{"nodes": 2}'"""
        ) from None
    except _Refused as exc:
        raise GpufleetError(f"{source}: {exc}") from None
    except RecursionError:
        raise GpufleetError(f"{source} is nested too deeply to be a DAG conf") from None
    try:
        _refuse_non_finite(conf)
    except _Refused as exc:
        raise GpufleetError(f"{source}: {exc}") from None
    except RecursionError:
        raise GpufleetError(f"{source} is nested too deeply to be a DAG conf") from None
    if not isinstance(conf, dict):
        raise GpufleetError(
            f"{source} must be a JSON object of Params, not {type(conf).__name__}; "
            """e.g. '{"nodes": 2}'"""
        )
    return conf


def run(args: argparse.Namespace) -> int:
    from gpufleet.cli.airflow_api import AirflowApi
    from gpufleet.cli.airflow_http import WaitTimeout

    conf = load_conf(args.conf)  # refused before any HTTP call
    password = airflow_password(args)

    api = AirflowApi(args.url, args.user, password, timeout=args.http_timeout)
    if api.ensure_runnable(args.dag_id, unpause=args.unpause):
        print(f"unpaused DAG {args.dag_id}", file=sys.stderr)
    dag_run = api.trigger(args.dag_id, conf, run_id=args.run_id, note=args.note)
    run_id = dag_run.dag_run_id
    print(f"run_id: {run_id}")
    print(f"url: {api.run_link(args.dag_id, run_id)}")
    sys.stdout.flush()
    if not args.wait:
        return 0

    started = time.monotonic()

    def on_change(old: str | None, new: str, _run: DAGRunResponse) -> None:
        elapsed = time.monotonic() - started
        change = f"{old} -> {new}" if old else new
        print(f"[{elapsed:6.1f}s] {args.dag_id} {run_id}: {change}", file=sys.stderr, flush=True)

    try:
        final = api.wait(
            args.dag_id, run_id, timeout=args.timeout, poll=args.poll, on_change=on_change
        )
    except WaitTimeout as exc:
        raise GpufleetError(f"{exc} (pass a larger --timeout to wait longer)") from exc
    state = final.state.value
    print(f"state: {state}")
    if state == "success":
        return 0
    failed = api.failed_tasks(args.dag_id, run_id)
    print(f"failed_tasks: {', '.join(failed) if failed else '(none reported)'}")
    print(
        f"gpufleet: run {run_id} of {args.dag_id} {state}"
        + (f"; failed tasks: {', '.join(failed)}" if failed else "")
        + f"; logs: {api.run_link(args.dag_id, run_id)}",
        file=sys.stderr,
    )
    return 1
