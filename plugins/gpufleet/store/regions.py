"""Ledger records of region onboarding: where each region stands, what each run found,
created, would create or refused, and the region's onboarding lock (one run at a time,
``gf_region_locks``). A mixin of ``Ledger`` (it needs ``self.engine``)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import delete, insert, select, update
from sqlalchemy.exc import IntegrityError

from gpufleet.store import schema as s
from gpufleet.store.transitions import unchanged

REGION_STATES = ("onboarding", "ready", "failed")


class RegionRecords:
    """``set_region_state``/``region_state``/``region_states``, ``record_onboarding_action``
    and ``onboarding_actions``, and the lock: ``hold_region_lock``, ``heartbeat_region_lock``
    (the holder's lease), ``take_over_region_lock``, ``release_region_lock``, ``region_lock``."""

    engine: Any

    def set_region_state(
        self, region: str, state: str, reason: str | None = None, run_id: str | None = None
    ) -> None:
        if state not in REGION_STATES:
            raise ValueError(f"region state {state!r} is not one of {', '.join(REGION_STATES)}")
        now = datetime.now(UTC)
        t = s.regions
        values: dict[str, Any] = {"state": state, "reason": reason, "run_id": run_id}
        values["updated_at"] = now
        if state == "ready":
            values["ready_at"] = now
        with self.engine.begin() as conn:
            if conn.execute(update(t).where(t.c.region == region).values(**values)).rowcount:
                return
            try:
                with conn.begin_nested():
                    conn.execute(insert(t).values(region=region, **values))
            except IntegrityError:  # another process inserted it first
                conn.execute(update(t).where(t.c.region == region).values(**values))

    def region_state(self, region: str) -> dict[str, Any] | None:
        t = s.regions
        with self.engine.connect() as conn:
            row = conn.execute(select(t).where(t.c.region == region)).first()
        return dict(row._mapping) if row is not None else None

    def region_states(self) -> dict[str, dict[str, Any]]:
        with self.engine.connect() as conn:
            return {r.region: dict(r._mapping) for r in conn.execute(select(s.regions)).all()}

    def record_onboarding_action(
        self, region: str, run_id: str, step: str, action: dict[str, Any]
    ) -> None:
        """One ``Ensured.to_dict()`` (or a refusal: ``action='refused'``) of a step."""
        with self.engine.begin() as conn:
            conn.execute(
                insert(s.onboarding_actions).values(
                    region=region,
                    run_id=run_id,
                    step=step,
                    kind=action["kind"],
                    name=action["name"],
                    action=action["action"],
                    status=action.get("status"),
                    differences=list(action.get("differences") or []),
                    console_url=action.get("console_url"),
                    detail=action.get("detail") or {},
                    at=datetime.now(UTC),
                )
            )

    def onboarding_actions(self, region: str, run_id: str | None = None) -> list[dict[str, Any]]:
        """A run's actions in order (the region's latest run when ``run_id`` is None)."""
        t = s.onboarding_actions
        with self.engine.connect() as conn:
            if run_id is None:
                last = conn.execute(
                    select(t.c.run_id).where(t.c.region == region).order_by(t.c.id.desc()).limit(1)
                ).scalar()
                if last is None:
                    return []
                run_id = last
            rows = conn.execute(
                select(t).where(t.c.region == region, t.c.run_id == run_id).order_by(t.c.id)
            ).all()
        return [dict(r._mapping) for r in rows]

    # --- the onboarding lock ---------------------------------------------------------------

    def hold_region_lock(
        self, region: str, dag_id: str, run_id: str, now: datetime | None = None
    ) -> dict[str, Any]:
        """Take the region's lock for ``run_id`` when nobody holds it, its first heartbeat at
        ``now``; the lock's row either way (``run_id`` says who holds it: this run, or the one
        to judge alive or dead)."""
        t = s.region_locks
        now = now or datetime.now(UTC)
        try:
            with self.engine.begin() as conn:
                conn.execute(
                    insert(t).values(
                        region=region, dag_id=dag_id, run_id=run_id, taken_at=now, heartbeat_at=now
                    )
                )
        except IntegrityError:  # held (perhaps by this run: a later step)
            row = self.region_lock(region)
            if row is None:  # released in between: try once more
                return self.hold_region_lock(region, dag_id, run_id, now)
            return row
        return self.region_lock(region) or {}

    def heartbeat_region_lock(self, region: str, run_id: str, now: datetime) -> bool:
        """The holder renews its lease (``heartbeat_at = now``) if ``run_id`` still holds the
        region's lock; False when it does not (taken over): the caller must stop."""
        t = s.region_locks
        with self.engine.begin() as conn:
            changed = conn.execute(
                update(t).where(t.c.region == region, t.c.run_id == run_id).values(heartbeat_at=now)
            ).rowcount
        return changed == 1

    def take_over_region_lock(
        self,
        region: str,
        seen: dict[str, Any],
        dag_id: str,
        run_id: str,
        now: datetime | None = None,
    ) -> bool:
        """Make ``run_id`` the holder if the holder and its heartbeat are still those of
        ``seen`` (the row the caller judged dead): compare-and-set, so of many runs taking over
        one wins, and a holder that renewed its lease meanwhile keeps it."""
        t = s.region_locks
        now = now or datetime.now(UTC)
        with self.engine.begin() as conn:
            changed = conn.execute(
                update(t)
                .where(
                    t.c.region == region,
                    t.c.run_id == seen["run_id"],
                    unchanged(t.c.heartbeat_at, seen.get("heartbeat_at")),
                )
                .values(dag_id=dag_id, run_id=run_id, taken_at=now, heartbeat_at=now)
            ).rowcount
        return changed == 1

    def release_region_lock(self, region: str, run_id: str) -> bool:
        """Release the lock if ``run_id`` holds it (never another run's); True if it did."""
        t = s.region_locks
        with self.engine.begin() as conn:
            gone = conn.execute(delete(t).where(t.c.region == region, t.c.run_id == run_id))
        return gone.rowcount == 1

    def region_lock(self, region: str) -> dict[str, Any] | None:
        t = s.region_locks
        with self.engine.connect() as conn:
            row = conn.execute(select(t).where(t.c.region == region)).first()
        return dict(row._mapping) if row is not None else None
