"""What every gpufleet operator shares: the ledger connection, the catalog, polling, the run's
watcher and branches that keep it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator, BranchMixIn

if TYPE_CHECKING:  # DAG files import operators at parse time: keep heavy imports lazy
    from gpufleet.domain.fleet import Catalog, Cluster
    from gpufleet.store import Ledger

SIM_POLL_S = 0.5
REAL_POLL_S = 30.0


def mask_url_secret(url: str) -> None:
    """Register the password in ``url`` (``scheme://user:password@host/...``) with Airflow's
    secrets masker, so a task log that quotes the URL shows ``***`` instead."""
    from urllib.parse import unquote, urlsplit

    from airflow.sdk.log import mask_secret

    try:
        password = urlsplit(url).password
    except ValueError:  # unparsable: the ledger refuses it, without quoting it
        return
    if password:
        mask_secret(password)
        mask_secret(unquote(password))


def ledger(conn_id: str | None = None) -> Ledger:
    """The ledger, found as every entry point finds it (``gpufleet.airflow.hooks.LedgerHook``):
    ``GPUFLEET_LEDGER_URL``, else the Airflow connection ``conn_id`` (None: ``gpufleet_ledger``),
    else the local default only when nothing is configured. The URL's password is masked in
    task logs."""
    from gpufleet.airflow.hooks import LedgerHook

    hook = LedgerHook(conn_id)
    url, _source = hook.resolve()
    mask_url_secret(url)
    return hook.get_conn()


def catalog() -> Catalog:
    from gpufleet.config.catalog import load_catalog

    return load_catalog()


# Polls a deployment's triggerer makes per second over a fleet's waits, at most: past
# ``POLLS_PER_S x interval`` pools, every wait polls less often (``poll_interval``).
POLLS_PER_S = 20.0


def poll_interval(cluster: Cluster, fleet_pools: int = 0) -> float:
    """How often a wait on ``cluster`` polls: simulated clusters answer in seconds, real ones
    are polled gently; and a fleet of ``fleet_pools`` pools, each a wait in the triggerer on a
    night, is polled at most ``POLLS_PER_S`` times a second in all (2,000 pools: every 100 s)."""
    base = SIM_POLL_S if cluster.provider == "sim" else REAL_POLL_S
    return max(base, fleet_pools / POLLS_PER_S)


def pools_per_run() -> int:
    """``[gpufleet] pools_per_run`` (default ``fanout.POOLS_PER_RUN``): the most pools one
    nightly run validates, below ``[core] max_map_length``; a bad value is refused, naming it."""
    from airflow.configuration import conf

    from gpufleet.services.validation.fanout import POOLS_PER_RUN, check_pools_per_run

    raw = conf.get("gpufleet", "pools_per_run", fallback=str(POOLS_PER_RUN))
    return check_pools_per_run(raw, conf.getint("core", "max_map_length", fallback=1024))


def failed_tasks(context, exclude: tuple[str, ...] = ()) -> list[str]:
    """This run's tasks (``task_id`` or ``task_id_<map index>``) that failed or whose upstream
    failed, but for ``exclude`` (task ids) and the watcher: for a task's text or decision (the
    region's recorded reason, the watcher's message). The run's failure itself comes from the
    ``watcher`` task (``RunWatcherOperator``), never from a report reading this."""
    run_id = context["run_id"]
    states = context["ti"].get_task_states(dag_id=context["dag"].dag_id, run_ids=[run_id])
    exclude = (*exclude, WATCHER_ID)  # it fails because the others did: it names none
    return sorted(
        key
        for key, state in (states or {}).get(run_id, {}).items()
        if state in ("failed", "upstream_failed") and not key.startswith(exclude)
    )


WATCHER_ID = "watcher"


class RunWatcherOperator(BaseOperator):
    """Airflow's ``watcher()`` idiom: downstream of every task of the DAG with trigger rule
    ``one_failed``, it runs (and fails, naming the tasks) only when a task failed, so the run
    fails although a report or teardown after the failure succeeded; otherwise it is skipped
    and the run succeeds. ``dagkit.watch()`` adds it."""

    ui_color = "#ffd6d6"

    def __init__(self, **kwargs: Any):
        kwargs.setdefault("task_id", WATCHER_ID)
        kwargs.setdefault("trigger_rule", "one_failed")
        kwargs.setdefault("retries", 0)
        kwargs.setdefault("on_failure_callback", None)  # the failed tasks alerted already
        super().__init__(**kwargs)

    def execute(self, context) -> None:
        from airflow.sdk.exceptions import AirflowFailException

        failed = failed_tasks(context, (self.task_id,))
        raise AirflowFailException(
            f"{', '.join(failed) or 'a task'} did not succeed: the run fails (watcher)"
        )


class WatchedBranchMixIn(BranchMixIn):
    """A branch that never skips the ``watcher``: Airflow skips every direct downstream task a
    branch does not follow, and the watcher is downstream of every task. An operator lists it
    after ``BaseOperator`` and sets ``inherits_from_skipmixin = True`` itself (as
    ``BaseBranchOperator`` does: ``BaseOperator``'s property would win over the mixin's)."""

    def do_branch(self, context, branches_to_execute):
        chosen = [branches_to_execute] if isinstance(branches_to_execute, str) else []
        if not isinstance(branches_to_execute, str):
            chosen = list(branches_to_execute or ())
        if WATCHER_ID in self.downstream_task_ids:
            chosen.append(WATCHER_ID)
        return super().do_branch(context, chosen)
