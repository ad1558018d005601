"""Start a DAG run under a run id of our choosing, or wait for it when it exists already.

``TriggerDagRunOperator`` fails when its run exists: a retry of the nightly's
``validate_clusters`` (its worker killed after it started the cluster run, or while it
resumed from the wait) would fail on the very run its first try started, and the report would
then read a cluster run still in progress. ``ClusterRunOperator`` first asks whether the run
exists: when it does not, it triggers it as ``TriggerDagRunOperator`` does; when it does (a
retry, or a task cleared by hand), it waits for that run, deferred on the same
``DagStateTrigger`` (failing at once when its DAG is paused, as a first try does), or ends at
once when the run has ended already. It never starts a second run for a cluster, and it never
resets the one it found.
"""

from __future__ import annotations

from typing import Any

from airflow.providers.standard.operators.trigger_dagrun import DagIsPaused, TriggerDagRunOperator


class ClusterRunOperator(TriggerDagRunOperator):
    """``TriggerDagRunOperator`` that waits for its run instead of failing when it exists."""

    def execute(self, context: Any):
        from gpufleet.airflow.operators.runs import dag_run_state, run_state

        run_id = str(self.trigger_run_id)
        state = dag_run_state(context, self.trigger_dag_id, run_id)
        if state is None:
            return super().execute(context)
        self.log.info(
            "%s run %s exists already (%s; started by an earlier try): waiting for it, "
            "not starting another",
            self.trigger_dag_id,
            run_id,
            state,
        )
        context["ti"].xcom_push(key="trigger_run_id", value=run_id)  # the Triggered DAG link
        if not self.wait_for_completion:
            return None
        ended = {run_state(s) for s in [*self.allowed_states, *self.failed_states]}
        if state in ended:
            return self.execute_complete(context, ("", {"run_ids": [run_id], run_id: state}))
        if self.fail_when_dag_is_paused and context["ti"].get_dag(self.trigger_dag_id).is_paused:
            # its run would stay queued: fail now, as a first try does before triggering
            raise DagIsPaused(dag_id=self.trigger_dag_id)
        from airflow.providers.standard.triggers.external_task import DagStateTrigger

        self.defer(
            trigger=DagStateTrigger(
                dag_id=self.trigger_dag_id,
                states=[*self.allowed_states, *self.failed_states],
                execution_dates=None,
                run_ids=[run_id],
                poll_interval=self.poke_interval,
            ),
            method_name="execute_complete",
        )
        return None
