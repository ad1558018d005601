"""The simulated fleet's performance model: what healthy hardware delivers.

Reads ``include/sim/fabric.yaml`` (bus bandwidth and small-message time per GPU model x GPUs
per node x transport, and NCCL's socket transport) and ``include/sim/filesystems.yaml`` (the
throughput tiers each Lustre product sells and what a healthy filesystem delivers at its
tier), and how each varies from night to night (``noise``: the sim's documented noise,
drawn by ``gpufleet.backends.sim.nights``). Every figure carries its source. Never reads
``include/baselines.yaml``: the verdicts judge the sim's figures against the baselines, so a
wrong baseline must be able to fail.

The files are read once per folder and modification time. A shape or tier the model does not
cover is refused with a ``BackendError`` naming the file to extend, never guessed.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gpufleet.backends.sim.output import LinkModel
from gpufleet.config.paths import include_dir
from gpufleet.domain.fleet import Filesystem, NodePool
from gpufleet.errors import BackendError


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RdmaFigure(_Model):
    """A healthy pair of ``gpus_per_node`` x ``gpu_model`` nodes over one of ``transports``."""

    gpu_model: str
    gpus_per_node: int = Field(gt=0)
    transports: tuple[str, ...] = Field(min_length=1)
    busbw_gbps: float = Field(gt=0, allow_inf_nan=False)
    latency_us: float = Field(gt=0, allow_inf_nan=False)
    source: str = Field(min_length=10)


class SocketFigure(_Model):
    """NCCL's socket transport over a node's front-end NIC."""

    busbw_gbps: float = Field(gt=0, allow_inf_nan=False)
    latency_us: float = Field(gt=0, allow_inf_nan=False)
    source: str = Field(min_length=10)


class FabricNoise(_Model):
    """How a healthy pair's figures vary: from one night to the next (relative standard
    deviations) and between the message sizes of one run (``row_jitter``, +/- share)."""

    busbw_sd: float = Field(ge=0, lt=0.2, allow_inf_nan=False)
    latency_sd: float = Field(ge=0, lt=0.2, allow_inf_nan=False)
    row_jitter: float = Field(ge=0, lt=0.2, allow_inf_nan=False)
    source: str = Field(min_length=10)


class FabricModel(_Model):
    rdma: tuple[RdmaFigure, ...]
    sockets: SocketFigure
    noise: FabricNoise


class TierModel(_Model):
    """A Lustre product: the tiers it sells and the share of tier x capacity it delivers."""

    kind: str
    tiers_mbps_per_tib: tuple[int, ...] = Field(min_length=1)
    read: float = Field(gt=0, allow_inf_nan=False)  # share of tier x capacity, on average
    write: float = Field(gt=0, allow_inf_nan=False)
    source: str = Field(min_length=10)


class StorageNoise(_Model):
    """How a healthy filesystem's throughput varies: from one night to the next (relative
    standard deviation) and between the fio clients of one run (+/- share)."""

    night_sd: float = Field(ge=0, lt=0.2, allow_inf_nan=False)
    client_jitter: float = Field(ge=0, lt=0.2, allow_inf_nan=False)
    source: str = Field(min_length=10)


class StorageModel(_Model):
    filesystems: tuple[TierModel, ...]
    noise: StorageNoise


def model_dir() -> Path:
    """``include/sim`` (follows ``GPUFLEET_INCLUDE_DIR``)."""
    return include_dir() / "sim"


@lru_cache(maxsize=8)
def _load(path: str, mtime_ns: int, kind: type[_Model]) -> _Model:
    file = Path(path)
    try:
        return kind.model_validate(yaml.safe_load(file.read_text()))
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        raise BackendError(f"{file}: {where}: {err['msg']}") from None
    except yaml.YAMLError as exc:
        raise BackendError(f"{file}: not valid YAML: {exc}") from None


def _read(name: str, kind: type[_Model]) -> _Model:
    file = model_dir() / name
    try:
        mtime = file.stat().st_mtime_ns
    except OSError as exc:
        raise BackendError(
            f"{file}: the simulated fleet's model cannot be read ({exc.strerror})"
        ) from None
    return _load(str(file), mtime, kind)


def fabric_model() -> FabricModel:
    return _read("fabric.yaml", FabricModel)  # type: ignore[return-value]


def storage_model() -> StorageModel:
    return _read("filesystems.yaml", StorageModel)  # type: ignore[return-value]


def rdma_link(pool: NodePool, transport: str) -> LinkModel:
    """What a healthy pair of ``pool``'s nodes delivers over ``transport`` (gib, roce, ...)."""
    for fig in fabric_model().rdma:
        if (
            fig.gpu_model == pool.gpu.model
            and fig.gpus_per_node == pool.gpu.count
            and transport in fig.transports
        ):
            return LinkModel(fig.busbw_gbps, fig.latency_us)
    raise BackendError(
        f"the simulated fleet has no figure for {pool.gpu.count}x{pool.gpu.model} over "
        f"{transport}: add one, with its source, to {model_dir() / 'fabric.yaml'}"
    )


def socket_link() -> LinkModel:
    """NCCL over TCP sockets on the front-end NIC."""
    fig = fabric_model().sockets
    return LinkModel(fig.busbw_gbps, fig.latency_us)


def fabric_noise() -> FabricNoise:
    """How a healthy pair's figures vary (``include/sim/fabric.yaml`` ``noise``)."""
    return fabric_model().noise


def storage_noise() -> StorageNoise:
    """How a healthy filesystem's throughput varies (``include/sim/filesystems.yaml``)."""
    return storage_model().noise


def filesystem_tier(fs: Filesystem) -> TierModel:
    """The model of ``fs``'s product; refuses a tier the product does not sell."""
    for model in storage_model().filesystems:
        if model.kind == fs.kind:
            if fs.throughput_mbps_per_tib not in model.tiers_mbps_per_tib:
                tiers = ", ".join(str(t) for t in model.tiers_mbps_per_tib)
                raise BackendError(
                    f"{fs.kind} sells no {fs.throughput_mbps_per_tib} MB/s per TiB tier "
                    f"(tiers: {tiers}); filesystem {fs.name!r} cannot be simulated"
                )
            return model
    raise BackendError(
        f"the simulated fleet has no model of {fs.kind}: add one, with its source, to "
        f"{model_dir() / 'filesystems.yaml'}"
    )
