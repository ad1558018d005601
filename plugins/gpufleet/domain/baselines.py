"""Expected NCCL performance per machine shape: the type and how one is chosen. Pure.

``gpufleet.config.baselines`` loads ``include/baselines.yaml`` into these types.
"""

from __future__ import annotations

from collections.abc import Iterable

from pydantic import BaseModel, ConfigDict, Field

SMALL_MESSAGE_BYTES = 64 * 2**10  # latency is judged on messages up to 64 KiB


class Baseline(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    gpu_model: str
    gpus_per_node: int = Field(gt=0)
    nodes: int = Field(gt=1)
    collective: str
    transports: tuple[str, ...]
    busbw_gbps: float = Field(gt=0)
    large_message_bytes: int = Field(gt=0)
    small_latency_us_max: float = Field(gt=0)
    source: str = Field(min_length=10)


def select_baseline(
    baselines: Iterable[Baseline],
    gpu_model: str,
    gpus_per_node: int,
    nodes: int,
    collective: str,
    transport: str,
) -> Baseline | None:
    """The baseline for this shape, or None (a verdict without a baseline cannot pass)."""
    for b in baselines:
        if (
            b.gpu_model == gpu_model
            and b.gpus_per_node == gpus_per_node
            and b.nodes == nodes
            and b.collective == collective
            and transport in b.transports
        ):
            return b
    return None
