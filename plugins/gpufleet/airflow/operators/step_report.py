"""The one way an operator tells what a step did: each note to the task log, each alert and
page sent (``gpufleet.airflow.notifiers.send_alert``), for any ``StepReport``
(``gpufleet.services.common.step_report``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # DAG files import operators at parse time: keep heavy imports lazy
    from airflow.sdk.types import Logger  # an operator's self.log

    from gpufleet.services.common.step_report import StepReport

PAGE = "PAGE: a node needs a person"


def report_step(
    log: Logger,
    report: StepReport,
    *,
    alert: str,
    where: str,
    prefix: str | None = None,
    run_id: str | None = None,
) -> None:
    """Log ``report``'s notes as ``<prefix>: <note>`` (``prefix`` defaults to the step), send its
    alerts as ``alert`` and its pages as ``PAGE``, both about ``where`` (and ``run_id``)."""
    from gpufleet.airflow.notifiers import send_alert

    for note in report.notes:
        log.info("%s: %s", report.step if prefix is None else prefix, note)
    for text in report.alerts:
        send_alert(alert, where, text, run_id)
    for text in report.pages:
        send_alert(PAGE, where, text, run_id)
