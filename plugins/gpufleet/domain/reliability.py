"""How often a node leaves service and how long it stays out: incidents, time to repair (MTTR)
and time between incidents (MTBI), per node and per pool, from the node lifecycle's moves.

An incident of a node starts when it leaves service (a move from ``released``, or from no
record at all: a node with no row is in service, to any other state: ``quarantined`` or
``suspect``, or a person's quarantine) and ends when it is ``released`` again. Whatever it goes
through in between (retesting, draining, repairing, a person's page) is the same incident:
``released -> quarantined -> retesting -> released`` is one incident.

- time to repair = end - start of one incident;
- time between incidents = start of one incident - end of the node's previous one (a node's
  first incident has none);
- over a window ``[since, until]``: MTTR is the mean time to repair of the incidents that
  ended in it, MTBI the mean time between incidents of the incidents that started in it; an
  incident not yet ended is *open*: counted apart, never in MTTR.

Pure: the moves come in as ``Move`` records (the ledger's ``gf_node_events`` rows), in the
order the ledger recorded them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from gpufleet.domain.nodes import IN_SERVICE

_IN = str(IN_SERVICE)


@dataclass(frozen=True)
class Move:
    """One recorded move of a node (a ``gf_node_events`` row): ``from_state`` None when the
    node had no record (in service)."""

    cluster: str
    pool: str
    node: str
    from_state: str | None
    to_state: str
    at: datetime


@dataclass(frozen=True)
class Incident:
    """A node out of service: from ``start`` (it left ``released``) to ``end`` (released again;
    None while open)."""

    cluster: str
    pool: str
    node: str
    start: datetime
    end: datetime | None = None

    @property
    def open(self) -> bool:
        return self.end is None

    @property
    def repair_seconds(self) -> float | None:
        """Time to repair, None while open."""
        return None if self.end is None else (self.end - self.start).total_seconds()


@dataclass
class Reliability:
    """A node's or a pool's figures over a window: the times to repair of incidents that ended
    in it, the times between incidents of incidents that started in it, and the incidents still
    open (with their start)."""

    repair_seconds: list[float] = field(default_factory=list)
    between_seconds: list[float] = field(default_factory=list)
    open: list[Incident] = field(default_factory=list)

    @property
    def mttr_seconds(self) -> float | None:
        """Mean time to repair; None without a repaired incident (open ones do not count)."""
        return _mean(self.repair_seconds)

    @property
    def mtbi_seconds(self) -> float | None:
        """Mean time between incidents; None without two incidents of one node."""
        return _mean(self.between_seconds)

    @property
    def incidents(self) -> int:
        """Incidents repaired in the window plus those open."""
        return len(self.repair_seconds) + len(self.open)


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _leaves(move: Move) -> bool:
    return (move.from_state is None or move.from_state == _IN) and move.to_state != _IN


def _returns(move: Move) -> bool:
    return move.to_state == _IN and move.from_state is not None and move.from_state != _IN


def incidents(moves: Iterable[Move]) -> list[Incident]:
    """Each node's incidents, paired from its moves in recorded order: a move out of
    ``released`` opens one, the next move into ``released`` closes it; moves between (and a
    release with no incident seen open: it started before the moves given) open nothing. An
    incident keeps the pool of its last move. Ordered by node, then start."""
    opened: dict[tuple[str, str], Incident] = {}
    done: list[Incident] = []
    for m in moves:
        key = (m.cluster, m.node)
        current = opened.get(key)
        if current is None:
            if _leaves(m):
                opened[key] = Incident(m.cluster, m.pool, m.node, m.at)
            continue
        if _returns(m):
            done.append(Incident(m.cluster, m.pool, m.node, current.start, m.at))
            del opened[key]
        elif m.pool != current.pool:
            opened[key] = Incident(m.cluster, m.pool, m.node, current.start)
    done.extend(opened.values())
    return sorted(done, key=lambda i: (i.cluster, i.node, i.start))


def reliability(
    moves: Iterable[Move], since: datetime, until: datetime
) -> tuple[dict[tuple[str, str], Reliability], dict[tuple[str, str, str], Reliability]]:
    """Per pool ``(cluster, pool)`` and per node ``(cluster, pool, node)``: the window's
    figures (``Reliability``). An incident counts in MTTR when it ended in ``[since, until]``;
    its time between incidents counts when it started in the window and the node had an
    earlier incident (which may have ended before ``since``); an open incident that started by
    ``until`` is open. Pools and nodes with nothing in the window are left out."""
    pools: dict[tuple[str, str], Reliability] = {}
    nodes: dict[tuple[str, str, str], Reliability] = {}

    def add(incident: Incident) -> list[Reliability]:
        pool = pools.setdefault((incident.cluster, incident.pool), Reliability())
        node = nodes.setdefault((incident.cluster, incident.pool, incident.node), Reliability())
        return [pool, node]

    previous: dict[tuple[str, str], Incident] = {}
    for incident in incidents(moves):
        key = (incident.cluster, incident.node)
        before = previous.get(key)
        previous[key] = incident
        if incident.start > until:
            continue
        if incident.end is None:
            for r in add(incident):
                r.open.append(incident)
        elif since <= incident.end <= until:
            for r in add(incident):
                r.repair_seconds.append((incident.end - incident.start).total_seconds())
        if since <= incident.start and before is not None and before.end is not None:
            gap = (incident.start - before.end).total_seconds()
            for r in add(incident):
                r.between_seconds.append(gap)
    return pools, nodes
