"""The provider's view of a pool's topology, beside gpufleet's own verdicts: what the
cloud says about each sub-block (rack) the pool's machines sit in, and how a bad sub-block is
reported to it.

Design: docs/design/topology.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from gpufleet.backends.ensured import EnsureAction, Ensured

# A sub-block's health as the provider reports it (GKE ``healthInfo.healthStatus``; EKS and the
# sim: DEGRADED when any of its hosts is).
HEALTHY = "HEALTHY"
DEGRADED = "DEGRADED"
UNKNOWN = "UNKNOWN"  # the provider reports no health for it (GKE HEALTH_STATUS_UNSPECIFIED)
HEALTH_STATUSES = (HEALTHY, DEGRADED, UNKNOWN)

REPORT_KIND = "subblock_report"  # Ensured.kind of report_faulty_subblock
UNSUPPORTED = EnsureAction.UNSUPPORTED  # Ensured.action: no call to report a sub-block


@dataclass(frozen=True)
class SubBlockHealth:
    """One sub-block of a pool as its provider sees it.

    ``block`` and ``subblock`` are the values the nodes' topology labels carry (GKE:
    ``physicalTopology.block`` / ``.subBlock``, which ``cloud.google.com/gce-topology-block`` /
    ``-subblock`` hold; EKS: the network nodes of the two deepest layers), so ``key`` is
    ``Place.key`` of a node in it. ``hosts`` is how many hosts the provider counts in it (GKE:
    the sub-block's ``count``; EKS and the sim: the pool's machines placed there),
    ``healthy_hosts`` and ``degraded_hosts`` how many it reports healthy and degraded (GKE
    ``healthInfo``; None when it reports no counts). ``provider_name`` is the provider's name
    of the sub-block where it has one (GKE:
    ``reservations/R/reservationBlocks/B/reservationSubBlocks/S``); ``detail`` carries what
    else the provider said (zone, reservation, instances ...).
    """

    block: str
    subblock: str
    status: str  # one of HEALTH_STATUSES
    healthy_hosts: int | None
    degraded_hosts: int | None
    hosts: int | None = None
    provider_name: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return f"{self.block}/{self.subblock}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "block": self.block,
            "subblock": self.subblock,
            "status": self.status,
            "healthy_hosts": self.healthy_hosts,
            "degraded_hosts": self.degraded_hosts,
            "hosts": self.hosts,
            "provider_name": self.provider_name,
            "detail": dict(self.detail),
        }


@dataclass(frozen=True)
class ReservationHealth:
    """The provider's view of the capacity a pool's reservation holds (of its block, when the
    catalog pins one), read from the reservation alone: before the pool exists.

    ``subblocks``: one ``SubBlockHealth`` per sub-block, sorted by key (as ``subblock_health``
    gives them), or None when the provider reports no host health before instances run on the
    reservation (EKS), ``why`` then saying so and what it reports instead. ``detail``: what
    else the provider said (zone; EKS: the reservation's network nodes)."""

    reservation: str
    block: str | None
    subblocks: tuple[SubBlockHealth, ...] | None
    why: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "reservation": self.reservation,
            "block": self.block,
            "subblocks": None if self.subblocks is None else [h.to_dict() for h in self.subblocks],
            "why": self.why,
            "detail": dict(self.detail),
        }


def split_key(key: str) -> tuple[str, str]:
    """``(block, sub-block)`` of a ``Place.key``; a ``BackendError`` for anything else."""
    from gpufleet.errors import BackendError

    block, sep, subblock = (key or "").partition("/")
    if not sep or not block or not subblock or "/" in subblock:
        raise BackendError(
            f"sub-block {key!r} is not a sub-block key: expected <block>/<sub-block> as the "
            "nodes' topology labels give it (gpufleet.domain.topology.Place.key)"
        )
    return block, subblock


class ProviderTopology(Protocol):
    """The provider's view of a pool's sub-blocks (part of ``CloudBackend``)."""

    def subblock_health(self, pool: str) -> list[SubBlockHealth]:
        """Each sub-block of ``pool`` (of its reservation on GKE; holding its machines on EKS
        and the sim) with the provider's health of it, sorted by key."""

    def reservation_health(self, pool: str) -> ReservationHealth:
        """The sub-blocks of ``pool``'s reservation (its block) with the provider's health of
        each, read from the reservation alone: ``pool`` is the catalog's, and need not exist
        yet (onboarding's preflight). ``subblocks`` None where the provider reports no host
        health before launch (EKS)."""

    def report_faulty_subblock(
        self, pool: str, key: str, reason: str, dry_run: bool = False
    ) -> Ensured:
        """Report sub-block ``key`` of ``pool``'s reservation as faulty where the provider
        allows (GKE ``reservationSubBlocks.reportFaulty``: its VMs are disrupted at once, so
        report only a sub-block already taken out of service); ``unsupported`` on EKS. A report
        under way is ``found``; a key not of the pool's reservation is refused before any
        write."""
