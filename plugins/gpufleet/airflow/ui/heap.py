"""Fleet-wide reads with Python's cycle collector paused.

A fleet page or a ``/metrics`` scrape over 2,000 pools holds tens of thousands of container
objects (ledger rows, the gate's facts, the page's records) until its response is written. In
the api-server, whose heap holds some 300,000 objects of Airflow's, that many survivors make
the cycle collector run full collections over the whole heap, 0.1-0.3 s each, about one per
fleet page: most of the page's time at the 95th percentile (docs/PERFORMANCE.md). These objects
form no cycles (reference counting frees them when the response is written), so the collector
is paused while they are built and resumed when the last such read in the process ends; what
other threads allocate meanwhile is collected then. A collector already disabled is left so.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_readers = 0  # fleet-wide reads in progress in this process
_resume = False  # whether the collector was enabled when the first of them began


@contextmanager
def cycle_collector_paused() -> Iterator[None]:
    """Pause the cycle collector for the block (nesting and concurrent blocks count: it resumes
    when the last one ends, and only if it was enabled before the first began)."""
    global _readers, _resume
    with _lock:
        if _readers == 0:
            _resume = gc.isenabled()
            gc.disable()
        _readers += 1
    try:
        yield
    finally:
        with _lock:
            _readers -= 1
            if _readers == 0 and _resume:
                gc.enable()
