"""``gpufleet approve``: answer an approval task (Airflow's human-in-the-loop
``ApprovalOperator``, waiting in ``awaiting_input``) through Airflow 3.3's REST API, as CI does:
``PATCH /api/v2/dags/{dag}/dagRuns/{run}/taskInstances/{task}/{map_index}/hitlDetails`` with
``{"chosen_options": ["Approve"]}`` (or ``["Reject"]``). Airflow records who answered (the API
user: ``--user``) and when, and resumes the task; gpufleet's ledger records the same
(docs/remediation.md#approvals).

stdout gets ``key: value`` lines (``task``, ``answer``, ``by``, ``at``); exit 0 when the answer
was recorded, 2 for bad input or an API error (an unknown task, one not waiting for input yet,
one already answered: ``409``).
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from gpufleet.cli.args import HOUR_S, add_airflow_args, airflow_password, bounded_float
from gpufleet.errors import GpufleetError

APPROVE, REJECT = "Approve", "Reject"  # ApprovalOperator's options


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "approve",
        help="approve (or reject) a waiting approval task through Airflow's REST API (for CI)",
        description=(
            "Answer an approval task of a DAG run (e.g. reservation_transition's approve_retire) "
            "through Airflow's REST API: Approve, or Reject with --reject. Airflow records the "
            "API user as the one who answered."
        ),
    )
    parser.add_argument("dag_id", metavar="DAG_ID", help="e.g. reservation_transition")
    parser.add_argument("run_id", metavar="RUN_ID", help="the run (gpufleet trigger prints it)")
    parser.add_argument("task_id", metavar="TASK_ID", help="the approval task, e.g. approve_retire")
    parser.add_argument(
        "--map-index",
        type=int,
        default=-1,
        metavar="N",
        help="the mapped task instance (remediation_approvals' approve[N]); default -1",
    )
    parser.add_argument("--reject", action="store_true", help="answer Reject instead of Approve")
    parser.add_argument(
        "--wait",
        type=bounded_float(0, 7 * 24 * HOUR_S, "a number of seconds"),
        default=0.0,
        metavar="S",
        help="wait up to S seconds for the task to wait for input (default 0: it must already)",
    )
    parser.add_argument(
        "--poll",
        type=bounded_float(0, HOUR_S, "a number of seconds"),
        default=2.0,
        metavar="S",
        help="with --wait: seconds between looks. Default 2",
    )
    add_airflow_args(parser, "Airflow user, recorded as the approver")
    parser.set_defaults(func=run)


def _wait_for_input(api: Any, args: argparse.Namespace) -> None:
    """Until the task's request exists (its HITL detail: the task waits for input)."""
    from gpufleet.cli.airflow_http import DagRunNotFound

    deadline = time.monotonic() + args.wait
    while True:
        try:
            detail = api.get_hitl(args.dag_id, args.run_id, args.task_id, args.map_index)
        except DagRunNotFound:
            if time.monotonic() >= deadline:
                raise
            time.sleep(min(args.poll, max(deadline - time.monotonic(), 0.0)))
            continue
        if detail.response_received:
            raise GpufleetError(
                f"{args.task_id!r} of run {args.run_id!r} was answered already "
                f"({', '.join(detail.chosen_options or [])} by "
                f"{detail.responded_by_user.name if detail.responded_by_user else 'timeout'})"
            )
        print(f"subject: {detail.subject}", file=sys.stderr)
        return


def run(args: argparse.Namespace) -> int:
    from gpufleet.cli.airflow_api import AirflowApi

    password = airflow_password(args)
    api = AirflowApi(args.url, args.user, password, timeout=args.http_timeout)
    if args.wait > 0:
        _wait_for_input(api, args)
    option = REJECT if args.reject else APPROVE
    answer = api.respond(args.dag_id, args.run_id, args.task_id, args.map_index, [option])
    task = args.task_id + (f"[{args.map_index}]" if args.map_index >= 0 else "")
    print(f"task: {args.dag_id} {args.run_id} {task}")
    print(f"answer: {', '.join(answer.chosen_options)}")
    print(f"by: {answer.responded_by.name}")
    print(f"at: {answer.responded_at.isoformat()}")
    print(f"url: {api.run_link(args.dag_id, args.run_id)}")
    return 0
