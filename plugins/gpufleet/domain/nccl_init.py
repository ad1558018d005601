"""Alarms from NCCL's communicator init: a phase far slower than a healthy setup takes.

Pure domain code: it reads the slowest figure of each init phase (seconds, and where it was
seen) as a parser of the NCCL ``Init timings`` lines gives them, and names what is wrong.

- ``kernels`` over 5 s: NCCL is loading its kernels for far longer than it should, which is what
  a build that JIT-compiles them does (an NCCL built for an older CUDA on a newer GPU: 52 s of a
  55 s init on DGX B200, NVIDIA/nccl#1646; healthy public runs load them in 0.2-0.7 s).
- ``bootstrap`` over 30 s: the ranks found each other late, which is the launcher (ranks started
  far apart) or the out-of-band network (``NCCL_SOCKET_IFNAME``, a firewall), not the GPUs;
  healthy 2-node x 8-GPU runs bootstrap in under 1 s (NVIDIA/nccl-tests#319), single-node ones
  up to 1.6 s (NVIDIA/nccl#534), and Meta reports 2.5 min for a whole init at many thousand GPUs
  (NVIDIA/nccl#1156), so the limit is for the pairs and small jobs the validation runs.

An alarm is a note on the verdict, never a failure: the pair's bandwidth and transport judge it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "ALARM_PREFIX",
    "BOOTSTRAP_LIMIT_S",
    "KERNELS_LIMIT_S",
    "InitAlarm",
    "init_alarms",
    "is_init_alarm",
    "pair_alarms",
]

KERNELS_LIMIT_S = 5.0
BOOTSTRAP_LIMIT_S = 30.0
ALARM_PREFIX = "NCCL init alarm"

_WHY = {
    "kernels": (
        KERNELS_LIMIT_S,
        "nccl-init-kernels",
        "NCCL spent that long loading its kernels, as a build that JIT-compiles them does "
        "(an NCCL built for an older CUDA than the GPU wants: NVIDIA/nccl#1646); use an NCCL "
        "build for this GPU and CUDA",
    ),
    "bootstrap": (
        BOOTSTRAP_LIMIT_S,
        "nccl-init-bootstrap",
        "the ranks found each other that late: the launcher started them far apart, or the "
        "out-of-band network (NCCL_SOCKET_IFNAME, a firewall) is slow",
    ),
}


@dataclass(frozen=True, slots=True)
class InitAlarm:
    name: str  # ``nccl-init-kernels`` | ``nccl-init-bootstrap``
    phase: str
    seconds: float  # the slowest rank's
    limit_s: float
    where: str  # ``rank 4 of 8 on host-a``
    median_s: float | None = None

    @property
    def note(self) -> str:
        """The sentence for a verdict's reasons and the report."""
        median = f", median {self.median_s:.2f} s" if self.median_s is not None else ""
        return (
            f"{ALARM_PREFIX} ({self.name}): the {self.phase} phase took {self.seconds:.2f} s "
            f"({self.where}{median}; over {self.limit_s:g} s): {_WHY[self.phase][2]}"
        )


def init_alarms(
    slowest: Mapping[str, tuple[float, str]],
    medians: Mapping[str, float] | None = None,
) -> tuple[InitAlarm, ...]:
    """The alarms for the slowest figure of each phase (``phase -> (seconds, where)``)."""
    alarms: list[InitAlarm] = []
    for phase, (limit, name, _) in _WHY.items():
        figure = slowest.get(phase)
        if figure is None:
            continue
        seconds, where = figure
        if seconds > limit:
            median = (medians or {}).get(phase)
            alarms.append(InitAlarm(name, phase, seconds, limit, where, median))
    return tuple(alarms)


def is_init_alarm(reason: str) -> bool:
    """Whether a verdict's reason is one of these notes (not a failure)."""
    return reason.startswith(ALARM_PREFIX)


def pair_alarms(rows: Iterable[Mapping[str, Any]]) -> list[str]:
    """The init alarms among pair rows' reasons (``PairVerdict.as_row``), each named by its
    pair, once, in the rows' order: the notes a pool's verdict carries."""
    notes: list[str] = []
    for row in rows:
        for reason in row.get("reasons") or ():
            note = f"{row['node_a']}/{row['node_b']}: {reason}"
            if is_init_alarm(reason) and note not in notes:
                notes.append(note)
    return notes
