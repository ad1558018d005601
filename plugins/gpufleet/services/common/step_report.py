"""One step's report, whatever the step: an onboarding step, a transition step or rollback, a
pool drain's turn, a pool's retirement poll, a node remediation pass.

``StepReport`` carries what every step tells its caller: ``notes`` (sentences for the task log
and the report), ``alerts`` (to send: something waits that a person may want to know about),
``pages`` (to send at once: a person must act), whether the step is ``done`` or must be called
again after ``next_check_s``, ``failed`` (why the step's work did not pass, when it did not),
and ``detail`` (what the step records in the ledger). A step with a payload of its own adds it
as fields of a subclass (a drain's ``state``, an onboarding step's ``actions``). The Airflow side
logs and sends any report one way (``gpufleet.airflow.operators.step_report``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any


@dataclass
class StepReport:
    """What one call of a step did (see the module docstring)."""

    step: str = ""
    done: bool = True
    next_check_s: float = 0.0
    notes: list[str] = field(default_factory=list)
    alerts: list[str] = field(default_factory=list)
    pages: list[str] = field(default_factory=list)
    detail: dict[str, Any] = field(default_factory=dict)
    failed: str | None = None

    def wait(self, next_check_s: float) -> None:
        """Not done: call the step again after ``next_check_s``."""
        self.done, self.next_check_s = False, next_check_s

    def absorb(self, other: StepReport) -> None:
        """Take ``other``'s notes, alerts and pages (a step made of smaller steps)."""
        self.notes += other.notes
        self.alerts += other.alerts
        self.pages += other.pages

    def to_dict(self) -> dict[str, Any]:
        """Every field, as a task returns it (its XCom)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}
