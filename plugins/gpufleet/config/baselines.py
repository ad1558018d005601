"""Load expected NCCL performance (``include/baselines.yaml``) into the domain's types."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from gpufleet.config.paths import include_dir
from gpufleet.domain.baselines import Baseline, select_baseline
from gpufleet.errors import CatalogError


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
    """The baseline for this shape from the baselines file, or None."""
    return select_baseline(
        load_baselines(path), gpu_model, gpus_per_node, nodes, collective, transport
    )
