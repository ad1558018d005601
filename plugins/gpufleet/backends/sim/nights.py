"""One night's figures in the simulated fleet: the model's healthy figure, times the drift in
force, times the model's documented noise.

Design: docs/design/simulated-fleet.md.
"""

from __future__ import annotations

import random

from gpufleet.backends.sim.output import LinkModel, nccl_rows
from gpufleet.backends.sim.performance import FabricNoise, StorageNoise, TierModel
from gpufleet.domain.fleet import SATURATING_CLIENTS

CUT_SD = 3.0  # noise draws are cut at this many standard deviations: a healthy pair stays sane


def _normal(rng: random.Random, sd: float) -> float:
    """A multiplicative factor around 1: normal with relative ``sd``, cut at ``CUT_SD``."""
    z = max(-CUT_SD, min(CUT_SD, rng.gauss(0.0, 1.0)))
    return 1.0 + sd * z


def drift_factor(percent_per_night: float, nights: int) -> float:
    """The share of bus bandwidth left after ``nights`` nights of ``drift:<percent>``."""
    if not 0 <= percent_per_night < 100 or nights < 0:
        raise ValueError(
            f"drift of {percent_per_night}% per night over {nights} nights is not a drift"
        )
    return (1 - percent_per_night / 100) ** nights


def pair_link(
    healthy: LinkModel, noise: FabricNoise, rng: random.Random, decay: float = 1.0
) -> LinkModel:
    """What one pair delivers in one run: the healthy figure with tonight's noise, and its bus
    bandwidth times ``decay`` (``drift_factor``; 1.0 without drift)."""
    busbw = healthy.busbw_gbps * decay * _normal(rng, noise.busbw_sd)
    latency = healthy.latency_us * _normal(rng, noise.latency_sd)
    return LinkModel(busbw, latency)


def pair_rows(
    link: LinkModel,
    noise: FabricNoise,
    rng: random.Random,
    *,
    collective: str = "all_reduce",
    ranks: int = 16,
    min_bytes: int = 8,
    max_bytes: int = 8 * 2**30,
) -> list[tuple[int, list[tuple[float, float, float]]]]:
    """The pair's nccl-tests figures per message size (``output.nccl_rows``) with the model's
    row jitter: what the sim prints for one run."""
    return nccl_rows(
        collective=collective,
        ranks=ranks,
        link=link,
        min_bytes=min_bytes,
        max_bytes=max_bytes,
        row_jitter=noise.row_jitter,
        rng=rng,
    )


def lustre_clients(
    expected_mib_s: float,
    tier: TierModel,
    noise: StorageNoise,
    rng: random.Random,
    clients: int,
    factor: float = 1.0,
) -> list[tuple[float, float]]:
    """``(read, write)`` MiB/s of each of ``clients`` fio clients in one run: tier x capacity
    (``expected_mib_s``) times the product's delivered share, tonight's noise (read and write
    drawn apart) and ``factor`` (``lustre-slow``), split evenly with each client's jitter.
    A client drives at most ``1/SATURATING_CLIENTS`` of it: fewer clients deliver less."""
    if clients < 1:
        raise ValueError(f"fio needs at least one client (got {clients})")
    read = expected_mib_s * factor * tier.read * _normal(rng, noise.night_sd)
    write = expected_mib_s * factor * tier.write * _normal(rng, noise.night_sd)
    j = noise.client_jitter
    shares = max(clients, SATURATING_CLIENTS)  # one client drives at most its share of the tier
    return [
        (read / shares * rng.uniform(1 - j, 1 + j), write / shares * rng.uniform(1 - j, 1 + j))
        for _ in range(clients)
    ]
