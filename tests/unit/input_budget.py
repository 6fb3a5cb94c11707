"""A time and memory budget per hostile input, for fuzz and bound tests: the CPU time of this
thread and the peak of Python's allocations (tracemalloc) while the block runs."""

from __future__ import annotations

import time
import tracemalloc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def within_budget(seconds: float, megabytes: float, what: object = "") -> Iterator[None]:
    """Fails the test when the block takes more CPU seconds or allocates more at its peak."""
    started_tracing = not tracemalloc.is_tracing()
    if started_tracing:
        tracemalloc.start()
    tracemalloc.reset_peak()
    base = tracemalloc.get_traced_memory()[0]
    started = time.thread_time()
    try:
        yield
    finally:
        spent = time.thread_time() - started
        peak = (tracemalloc.get_traced_memory()[1] - base) / (1 << 20)
        if started_tracing:
            tracemalloc.stop()
    assert spent < seconds, f"{spent:.2f} s of CPU (budget {seconds} s): {str(what)[:200]!r}"
    assert peak < megabytes, f"{peak:.1f} MiB at peak (budget {megabytes}): {str(what)[:200]!r}"
