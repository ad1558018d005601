"""Expected NCCL performance (``include/baselines.yaml``). Pure domain code."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gpufleet.errors import CatalogError
from gpufleet.paths import include_dir

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


class _File(BaseModel):
    model_config = ConfigDict(extra="forbid")
    baselines: tuple[Baseline, ...]


@lru_cache(maxsize=4)
def load_baselines(path: str | None = None) -> tuple[Baseline, ...]:
    file = Path(path) if path else include_dir() / "baselines.yaml"
    try:
        return _File.model_validate(yaml.safe_load(file.read_text())).baselines
    except OSError as exc:
        raise CatalogError(f"{file}: cannot read baselines: {exc.strerror}") from None
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        raise CatalogError(f"{file}: {where}: {err['msg']}") from None


def find_baseline(
    gpu_model: str,
    gpus_per_node: int,
    nodes: int,
    collective: str,
    transport: str,
    path: str | None = None,
) -> Baseline | None:
    """The baseline for this shape, or None (a verdict without a baseline cannot pass)."""
    for b in load_baselines(path):
        if (
            b.gpu_model == gpu_model
            and b.gpus_per_node == gpus_per_node
            and b.nodes == nodes
            and b.collective == collective
            and transport in b.transports
        ):
            return b
    return None
