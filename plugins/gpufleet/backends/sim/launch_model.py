"""The sim's model of how a pair's two pods meet (the ``gang`` stage, ``domain.stages``): what
``run_times`` counts and what the sim's launcher prints (``programs``), apart so that neither
imports the other: the rendezvous, and the wait for the other pod's slower init steps.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

# ``gang``: from the containers' start until both pods of a pair are up and the launcher can
# start the ranks: sshd starting and one ssh round trip (0.3 s, an assumption), plus, while the
# launcher polled its peer's sshd every second (``sleep 1``), half a poll on average.
RENDEZVOUS_S = 0.3
POLL_WAIT_S = 0.5
RENDEZVOUS_MARK = "gpufleet-rendezvous"  # the launcher's script meets its peer, no poll

# The launcher's line at its rendezvous (``include/manifests/nccl-validation.yaml.j2``):
# seconds since its script started.
GANG_LINE = "[gpufleet] stage gang {seconds:.2f}"


def gang_seconds(template: dict[str, Any]) -> float:
    """The modelled ``gang`` stage of a pair's pods: a rendezvous, or a rendezvous and half an
    sshd poll when the launcher's script still polls."""
    main = ((template.get("spec") or {}).get("containers") or [{}])[0]
    words = " ".join([*(main.get("command") or ()), *(main.get("args") or ())])
    return RENDEZVOUS_S + (0.0 if RENDEZVOUS_MARK in words else POLL_WAIT_S)


def step_waits(steps: Sequence[Mapping[str, float]]) -> list[float]:
    """Per pod of a pair, given each pod's init steps (container -> modelled seconds, what
    ran before its main container): how long its main container waits for the other pod's
    slower steps before the rendezvous can complete (0 for the slowest pod). The launcher
    starts the ranks only once both pods are up, so this wait is part of its ``gang``."""
    done = [sum(s.values()) for s in steps]
    last = max(done, default=0.0)
    return [last - d for d in done]
