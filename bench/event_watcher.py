"""The event campaign's watcher (``bench.event_campaign``): the real ``NodeWatchTrigger`` of each
cluster named, run in this process as Airflow's triggerer runs it (``run()`` to each event),
each payload printed to stdout as one JSON line.

    python -m bench.event_watcher a3u-sim p5-sim [--flush-s 10] [--wait-for-go]

The sim's clock is frozen and only the campaign (the parent process) advances it: here
``PollingTrigger.clock`` follows that shared clock (``SharedSimClock``: ``time()`` reads it,
``sleep`` polls it in short real sleeps until the time asked for has come). Lines, one JSON
object each:

- ``{"kind": "ready"}``: imported; with ``--wait-for-go`` the triggers start only once a line is
  read from stdin (the campaign keeps a spare watcher imported, so a restart after a SIGKILL
  costs the trigger's own start, not Python's imports);
- ``{"kind": "batch", "cluster", "payload", "calls"}``: a ``TriggerEvent``'s payload (a
  ``Batch.to_dict()``) and the trigger's API calls so far (``NodeWatchTrigger.api_calls``);
- ``{"kind": "sleep", "cluster", "until", "calls"}``: the trigger waits on the clock until the
  sim time ``until`` (nothing more happens in it before then: the parent may advance to it).
"""

from __future__ import annotations

import argparse
import asyncio
import contextvars
import json
import os
import sys
import threading
import time

_out = threading.Lock()
_protocol = sys.stdout  # the campaign's lines only: ``main`` points fd 1 elsewhere
_cluster: contextvars.ContextVar[str] = contextvars.ContextVar("cluster", default="")


def emit(line: dict) -> None:
    with _out:
        _protocol.write(json.dumps(line, default=str) + "\n")
        _protocol.flush()


class SharedSimClock:
    """``PollingTrigger.clock`` here: the sim's clock in the shared state file, which only the
    campaign moves. ``sleep`` reports when it will wake, then polls the clock every ``poll_s``
    of real time until then (a ``gpufleet.domain.clock.Clock``)."""

    def __init__(self, calls, poll_s: float = 0.005):
        from gpufleet.backends.sim.state import SimState

        self.sim = SimState().clock
        self.calls = calls  # cluster -> its trigger's API calls so far
        self.poll_s = poll_s

    def time(self) -> float:
        return self.sim.time()

    def now(self):
        return self.sim.now()

    def monotonic(self) -> float:
        return self.sim.time()

    def sleep(self, seconds: float) -> None:
        until = self.time() + max(seconds, 0.0)
        cluster = _cluster.get()
        emit({"kind": "sleep", "cluster": cluster, "until": until, "calls": self.calls(cluster)})
        while self.time() < until:
            time.sleep(self.poll_s)


async def watch(trigger) -> None:
    _cluster.set(trigger.cluster)  # copied into the threads the clock sleeps in
    async for event in trigger.run():
        emit(
            {
                "kind": "batch",
                "cluster": trigger.cluster,
                "payload": event.payload,
                "calls": dict(trigger.api_calls),
            }
        )


async def main_async(clusters: list[str], flush_s: float, watch_timeout_s: float) -> None:
    from gpufleet.airflow.event_triggers import NodeWatchTrigger
    from gpufleet.airflow.triggers import PollingTrigger

    triggers = {
        c: NodeWatchTrigger(cluster=c, flush_s=flush_s, watch_timeout_s=watch_timeout_s)
        for c in clusters
    }
    PollingTrigger.clock = SharedSimClock(lambda c: dict(triggers[c].api_calls) if c else {})
    await asyncio.gather(*(watch(t) for t in triggers.values()))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("clusters", nargs="+")
    parser.add_argument("--flush-s", type=float, default=10.0)
    parser.add_argument("--watch-timeout-s", type=float, default=60.0)
    parser.add_argument("--wait-for-go", action="store_true")
    args = parser.parse_args()
    global _protocol
    # the lines go to a copy of stdout; whatever else writes to stdout (a library's print, a
    # log handler) goes to stderr instead of into the campaign's lines
    _protocol = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    # what the triggers import on their first run, imported before the go
    import gpufleet.airflow.event_triggers  # noqa: F401
    import gpufleet.airflow.hooks  # noqa: F401
    import gpufleet.backends.sim.cluster  # noqa: F401
    from gpufleet.config.catalog import load_catalog

    load_catalog()
    emit({"kind": "ready"})
    if args.wait_for_go and not sys.stdin.readline():
        return 0  # the campaign closed our stdin: never started
    asyncio.run(main_async(args.clusters, args.flush_s, args.watch_timeout_s))
    return 0


if __name__ == "__main__":
    sys.exit(main())
