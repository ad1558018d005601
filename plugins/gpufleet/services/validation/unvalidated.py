"""What a nightly did not validate, and why: the report's last word on the pools it
planned and recorded no verdict for.

A nightly skips a pool whose validation lock another run holds (``validation_lock.hold``): that
run's verdict stands. A run that skipped every pool validated nothing, and a green run must not
say otherwise: ``NotValidated`` lines say which pool and check, who holds its lock, and, for a
holder that will never hand it on, how to clear it. That holder is *stuck*: this Airflow reports
its run queued or running, so ``domain.leases.holder_dead`` never calls it dead, but it has not
renewed its lease for longer than the lease's time to live (``LEASE_TTL``). A killed
``airflow dags test`` leaves its run ``running`` for ever (nothing marks it failed), as does a
scheduler that lost it; until someone marks that run failed, every nightly skips the pool.

Reads the ledger's lock rows; Airflow's view of a run (``Liveness``) and the clock are
injected (no Airflow import here).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from gpufleet.domain.leases import (
    LEASE_MINUTES,
    LEASE_TTL,
    Liveness,
    holder_text,
    last_heartbeat,
    lease_expired,
)
from gpufleet.domain.validation_kinds import ValidationKind

if TYPE_CHECKING:
    from gpufleet.domain.fleet import Catalog
    from gpufleet.store import Ledger

# How to clear a stuck holder: its run marked failed, after which the next run takes the lock
MARK_FAILED_API = 'PATCH /api/v2/dags/{dag_id}/dagRuns/{run_id} with {{"state": "failed"}}'


@dataclass(frozen=True)
class NotValidated:
    """A check (``kind``: fabric or storage) of a pool that a run planned and recorded no
    verdict for. ``holder``: the validation lock's row when another run holds it (None: the
    lock is free; the check's task was skipped or failed before its verdict). ``stuck``: that
    holder's run is alive to Airflow, but its lease lapsed (see the module). ``alive``: what
    Airflow said of the holder's run (True running, False ended, None unknown)."""

    cluster: str
    pool: str
    kind: str
    holder: Mapping[str, Any] | None = None
    alive: bool | None = None
    stuck: bool = False
    silent_minutes: int | None = None

    @property
    def key(self) -> str:
        return f"{self.cluster}/{self.pool} {self.kind}"

    def clear_command(self) -> str:
        """How to free a stuck holder's lock: mark its run failed (the UI, or the REST API)."""
        assert self.holder is not None, "only a held lock has a holder to clear"
        dag_id, run_id = self.holder["dag_id"], self.holder["run_id"]
        api = MARK_FAILED_API.format(dag_id=dag_id, run_id=run_id)
        return (
            f"mark run {run_id} of {dag_id} failed (Airflow UI: Dags > {dag_id} > Runs > "
            f"{run_id} > Mark run as failed; or the REST API: {api}); the next run then takes "
            "the lock over"
        )

    def text(self) -> str:
        if self.holder is None:
            return f"{self.key}: no verdict (its task was skipped or failed before one)"
        held = f"{self.key}: skipped, its lock is held by {holder_text(dict(self.holder))}"
        if self.stuck:
            return (
                f"{held}: Airflow still shows that run running (or queued), "
                f"but it has not renewed its lease for {self.silent_minutes} minutes (more than "
                f"the lease's {LEASE_MINUTES}): a killed `airflow dags test` or a lost worker "
                f"leaves its run running and this pool is skipped every night until it is "
                f"cleared: {self.clear_command()}"
            )
        if self.alive is False:
            return f"{held}: that run has ended; the next run takes the lock over"
        return f"{held}, which is validating it: its verdict stands for this pool"


def not_validated(
    ledger: Ledger,
    planned: Iterable[tuple[str, str, str]],
    rows: Iterable[Mapping[str, Any]],
    own_runs: Iterable[str],
    holder_alive: Liveness,
    now: datetime,
) -> list[NotValidated]:
    """The ``planned`` checks (cluster, pool, kind) that ``rows`` (the run's verdicts) hold no
    verdict for, each with its lock's holder when another run (not one of ``own_runs``) holds
    it, and whether that holder is stuck. In ``planned``'s order."""
    done = {(r["cluster"], r["pool"], r["kind"]) for r in rows}
    mine = set(own_runs)
    out = []
    for cluster, pool, kind in dict.fromkeys(planned):
        if (cluster, pool, kind) in done:
            continue
        row = ledger.validation_lock(cluster, pool, kind).row()
        if row is None or row["run_id"] in mine:
            out.append(NotValidated(cluster, pool, kind))
            continue
        alive = holder_alive(row.get("dag_id") or "", row["run_id"])
        beat = last_heartbeat(row)
        silent = int((now - beat).total_seconds() // 60) if beat is not None else None
        stuck = alive is True and lease_expired(row, now, LEASE_TTL)
        out.append(NotValidated(cluster, pool, kind, row, alive, stuck, silent))
    return out


def planned_checks(
    catalog: Catalog, pool_keys: Iterable[str], mode: str
) -> list[tuple[str, str, str]]:
    """The checks a cluster run was planned to record for ``pool_keys`` (``cluster/pool``) in
    ``mode`` (``scope.plan_scope``'s rule: fabric for every pool, storage for a pool with a
    filesystem; a pool no longer in the catalog: fabric only)."""
    from gpufleet.errors import GpufleetError

    out: list[tuple[str, str, str]] = []
    for key in pool_keys:
        cluster, pool = key.split("/", 1)
        if mode in ("both", "fabric"):
            out.append((cluster, pool, ValidationKind.FABRIC))
        if mode in ("both", "storage"):
            try:
                has_fs = bool(catalog.pool(cluster, pool).filesystem)
            except GpufleetError:
                has_fs = False
            if has_fs:
                out.append((cluster, pool, ValidationKind.STORAGE))
    return out


def nothing_validated_text(skipped: list[NotValidated], planned: int) -> str:
    """The run's failure when it recorded no verdict at all for its ``planned`` checks."""
    held = [s for s in skipped if s.holder is not None]
    stuck = [s for s in skipped if s.stuck]
    head = (
        f"this run validated nothing: none of its {planned} planned checks recorded a verdict"
        + (f"; {len(held)} skipped because other runs hold their validation locks" if held else "")
        + (f"; {len(stuck)} behind a stuck holder (clear it: see below)" if stuck else "")
    )
    return head + ": " + " | ".join(s.text() for s in skipped)
