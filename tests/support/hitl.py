"""Answering Airflow's human-in-the-loop tasks in ``dag.test()`` runs (``run_dag(on_idle=...)``).

On Airflow 3.3 an approval task parks in ``awaiting_input``; ``dag.test()`` never resolves it
itself, it waits for a response recorded from outside. These do what the outside does, on the
metadata DB ``dag.test()`` shares:

- ``Answer``: what ``PATCH /api/v2/dags/{dag}/dagRuns/{run}/taskInstances/{task}/{map}/hitlDetails``
  does (``api_fastapi/core_api/routes/public/hitl.py``: the response on the ``HITLDetail`` row,
  then ``handle_event_submit`` resumes the task);
- ``TimeOut``: what the scheduler's ``check_awaiting_input_timeouts`` sweep does once the
  response deadline passed: the sweep itself runs, with Airflow's clock read just past the
  task's deadline (``trigger_timeout``): no wall-clock wait.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import timedelta
from types import SimpleNamespace


def awaiting(task_id: str | None = None):
    """The task instances waiting for input (of ``task_id``), with their HITL detail."""
    from airflow.models.taskinstance import TaskInstance as TI
    from airflow.utils.session import create_session
    from airflow.utils.state import TaskInstanceState
    from sqlalchemy import select
    from sqlalchemy.orm import joinedload

    with create_session() as session:
        query = (
            select(TI)
            .where(TI.state == TaskInstanceState.AWAITING_INPUT)
            .options(joinedload(TI.hitl_detail))
        )
        if task_id is not None:
            query = query.where(TI.task_id == task_id)
        tis = session.scalars(query).unique().all()
        return [
            (ti.dag_id, ti.run_id, ti.task_id, ti.map_index, ti.hitl_detail, ti.trigger_timeout)
            for ti in tis
        ]


@dataclass
class Answer:
    """Answer every waiting approval (of ``task_id``) with ``option``, as ``user`` would
    through the REST API. ``answered`` lists what it answered."""

    option: str = "Approve"
    user: str = "alice"
    task_id: str | None = None
    by_index: dict[int, str] = field(default_factory=dict)  # map index -> its own option
    answered: list[tuple[str, int]] = field(default_factory=list)

    def __call__(self) -> None:
        from airflow._shared.timezones import timezone
        from airflow.models.hitl import HITLDetail, HITLUser
        from airflow.models.taskinstance import TaskInstance as TI
        from airflow.models.trigger import handle_event_submit
        from airflow.triggers.base import TriggerEvent
        from airflow.utils.session import create_session
        from airflow.utils.state import TaskInstanceState
        from sqlalchemy import select

        with create_session() as session:
            query = select(TI).where(TI.state == TaskInstanceState.AWAITING_INPUT)
            if self.task_id is not None:
                query = query.where(TI.task_id == self.task_id)
            for ti in session.scalars(query).all():
                detail = session.scalar(select(HITLDetail).where(HITLDetail.ti_id == ti.id))
                if detail is None or detail.response_received:
                    continue
                detail.responded_by = HITLUser(id=self.user, name=self.user)
                detail.responded_at = timezone.utcnow()
                detail.chosen_options = [self.by_index.get(ti.map_index, self.option)]
                detail.params_input = {}
                session.add(detail)
                handle_event_submit(
                    TriggerEvent(detail.as_resume_event_payload()),
                    task_instance=ti,
                    session=session,
                )
                self.answered.append((ti.task_id, ti.map_index))


@dataclass
class TimeOut:
    """Let the response deadline of every waiting approval pass: the scheduler's own sweep runs
    with Airflow's clock one second past the latest deadline. ``swept`` counts the sweeps that
    had something to do."""

    swept: int = 0

    def __call__(self) -> None:
        from airflow.jobs import scheduler_job_runner as runner

        deadlines = [t[5] for t in awaiting() if t[5] is not None]
        if not deadlines:
            return
        later = max(deadlines) + timedelta(seconds=1)
        clock = runner.timezone
        real = clock.utcnow
        clock.utcnow = lambda: later  # Airflow's clock, for the sweep only
        try:
            stub = SimpleNamespace(log=logging.getLogger("hitl-timeout-sweep"))
            runner.SchedulerJobRunner.check_awaiting_input_timeouts(stub)  # type: ignore[arg-type]
        finally:
            clock.utcnow = real
        self.swept += 1
