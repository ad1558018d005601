"""Ledger records of region onboarding: where each region stands, what each run found,
created, would create or refused, and the region's onboarding lock (one run at a time,
``gf_region_locks``). A mixin of ``Ledger`` (it needs ``self.engine``)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import insert, select, update
from sqlalchemy.exc import IntegrityError

from gpufleet.domain.clock import Clock
from gpufleet.store import schema as s
from gpufleet.store.locks import LeaseLock

REGION_STATES = ("onboarding", "ready", "failed")


class RegionRecords:
    """``set_region_state``/``region_state``/``region_states``, ``record_onboarding_action``
    and ``onboarding_actions``, and the lock: ``region_lease`` (the ``LeaseLock`` that holds,
    renews and takes it over), ``release_region_lock``, ``region_lock``."""

    engine: Any
    clock: Clock

    def set_region_state(
        self, region: str, state: str, reason: str | None = None, run_id: str | None = None
    ) -> None:
        if state not in REGION_STATES:
            raise ValueError(f"region state {state!r} is not one of {', '.join(REGION_STATES)}")
        now = self.clock.now()
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
                    at=self.clock.now(),
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

    def region_lease(self, region: str) -> LeaseLock:
        return LeaseLock(self.engine, s.region_locks, {"region": region}, clock=self.clock)

    def release_region_lock(self, region: str, run_id: str) -> bool:
        """Release the lock if ``run_id`` holds it (never another run's); True if it did."""
        return self.region_lease(region).release(run_id)

    def region_lock(self, region: str) -> dict[str, Any] | None:
        return self.region_lease(region).row()
