"""The simulated clouds' own count of the API calls they answer, as a cloud's quota page counts
them: with ``GPUFLEET_SIM_CALL_LOG`` naming a folder, every call a sim backend answers (each
``_api_call``: cloud and Kubernetes API alike) appends one line, ``<unix time>\\t<call>``, to
``<folder>/<cluster>.calls``. ``bench/nightly_scale.py`` reads them (``read``, ``rates``) for
the API calls per second each cluster takes during a night on a live deployment.

Off by default: nothing is written unless the variable is set. Each line is one ``write`` on a
file opened for appending, so the task processes of every worker add whole lines side by side
without a lock. The time is the system clock's (what a cloud's rate limit counts against); the
sim's own clock (``sim_clock``) can be frozen by tests, and reading it costs a state read.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

CALL_LOG_ENV = "GPUFLEET_SIM_CALL_LOG"
SUFFIX = ".calls"


def record(cluster: str, what: str) -> None:
    """Append this call to ``cluster``'s log when ``GPUFLEET_SIM_CALL_LOG`` is set (the
    folder is made if missing)."""
    folder = os.environ.get(CALL_LOG_ENV)
    if not folder:
        return
    line = f"{time.time():.3f}\t{what}\n".encode()
    path = Path(folder) / f"{cluster}{SUFFIX}"
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT
    try:
        fd = os.open(path, flags, 0o644)
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, flags, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def read(folder: Path) -> dict[str, list[tuple[float, str]]]:
    """Each cluster's calls, (time, call) in the order they were written."""
    out: dict[str, list[tuple[float, str]]] = {}
    for path in sorted(Path(folder).glob(f"*{SUFFIX}")):
        calls = out.setdefault(path.name.removesuffix(SUFFIX), [])
        for line in path.read_text().splitlines():
            at, _, what = line.partition("\t")
            calls.append((float(at), what))
    return out


@dataclass(frozen=True)
class CallRate:
    """One cluster's calls: how many, over how long (its first call to its last), on average
    per second over that span, and the most in any ``window`` seconds, per second."""

    calls: int
    span_s: float
    per_s: float
    peak_per_s: float


def rates(
    logged: Mapping[str, list[tuple[float, str]]], window: float = 10.0
) -> dict[str, CallRate]:
    """Per cluster, the rate its calls came at (``logged``: what ``read`` returns);
    ``window``: the peak's."""
    if window <= 0:
        raise ValueError(f"window must be positive, not {window!r}")
    out = {}
    for cluster, calls in logged.items():
        times = sorted(at for at, _ in calls)
        if not times:
            continue
        span = times[-1] - times[0]
        peak, first = 0, 0
        for last, at in enumerate(times):  # the most calls in any window ending at a call
            while at - times[first] >= window:
                first += 1
            peak = max(peak, last - first + 1)
        per_s = len(times) / span if span > 0 else 0.0
        out[cluster] = CallRate(len(times), span, per_s, peak / window)
    return out
