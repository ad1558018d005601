"""The sim's model of how long a validation program's own work takes on the modelled clock,
whichever container runs it: a pod's main container, or an init container run as a step
before it. ``run_times`` counts it and ``programs`` needs it for the launcher's ``gang`` line
(a pair's launcher waits for the slower pod's steps), so it lives apart from both.
"""

from __future__ import annotations

from typing import Any

# ``diag_r<N>``: the tools that read counters and logs (3 s, an assumption), then ``dcgmi diag
# -r N``: level 1 about 30 s (NVIDIA's NVSentinel preflight docs; Azure runs it under
# ``timeout 1m``; NVIDIA's DCGM guide says "seconds"), level 2 about 2 minutes, level 3 about 15,
# level 4 1.5 to 2 hours (NVIDIA's DCGM user guide, run levels; taken as 1.75 h).
HEALTH_TOOLS_S = 3.0
DIAG_S = {1: 30.0, 2: 120.0, 3: 900.0, 4: 6300.0}


def fio_seconds(program: dict[str, Any], text: str) -> float | None:
    """fio's run (``program``: ``programs.program_of``'s ``fio``): each client writes then
    reads its ``--numjobs`` x ``--size`` at the throughput its own JSON output (``text``)
    reports, each pass capped by ``--runtime``. None when ``text`` holds no fio JSON."""
    from gpufleet.errors import ParseError
    from gpufleet.parsing import parse_fio_json

    try:
        fio = parse_fio_json(text)
    except ParseError:
        return None
    mib = program["size_mib"] * program["numjobs"]
    cap = program["runtime_s"] or float("inf")
    return sum(min(mib / bw, cap) for bw in (fio.write_mib_s, fio.read_mib_s) if bw)


def work_seconds(program: dict[str, Any], text: str) -> float | None:
    """How long ``program`` (``programs.program_of``) worked, given what it printed (``text``):
    the GPU health check ``HEALTH_TOOLS_S`` then ``DIAG_S`` of its ``dcgmi diag`` level; fio
    ``fio_seconds``. None where the model has no figure (fio without its JSON, nccl-tests or a
    training job: ``run_times`` models nccl-tests' run from the pair's output)."""
    if program["kind"] == "gpu-health":
        return HEALTH_TOOLS_S + DIAG_S[program["level"]]
    if program["kind"] == "fio":
        return fio_seconds(program, text)
    return None
