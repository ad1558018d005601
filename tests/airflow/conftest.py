"""``triggerer``: what Airflow's triggerer and workers do with a deferring operator, in this
process: run a trigger to its first event, and run an operator through its deferrals."""

from __future__ import annotations

import asyncio

import pytest
from airflow.sdk.exceptions import TaskDeferred


class Triggerer:
    def first_event(self, trigger, timeout: float = 60) -> dict:
        """Run ``trigger`` until it fires; its event's payload."""

        async def first():
            events = trigger.run()
            try:
                return (await anext(events)).payload
            finally:
                await events.aclose()

        return asyncio.run(asyncio.wait_for(first(), timeout))

    def fire(self, trigger, **changes) -> dict:
        """The first event of ``trigger`` rebuilt from its own kwargs with ``changes``."""
        _, kwargs = trigger.serialize()
        return self.first_event(type(trigger)(**{**kwargs, **changes}))

    def run(self, op, context):
        """``execute``, then the deferral's method on each event, until the operator returns."""
        step = lambda: op.execute(context)  # noqa: E731
        while True:
            try:
                return step()
            except TaskDeferred as deferred:
                assert deferred.method_name == "execute_complete"
                event = self.first_event(deferred.trigger)
                resume = getattr(op, deferred.method_name)
                step = lambda r=resume, e=event: r(context, event=e)  # noqa: E731


@pytest.fixture
def triggerer() -> Triggerer:
    return Triggerer()
