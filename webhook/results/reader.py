"""Reading a push's stacks away from the threads that answer plans and pages (issue 24).

The results service answers every namespace's plans, pushes and pages with one process of 8
threads. Reading stacks is CPU work in Python: even linear and capped, a thread that reads
holds the GIL, and every other thread then waits up to the switch interval (5 ms) each time
it needs it back; a page that reads a few hundred files waited seconds behind three pushes
being read (measured: plan and page p99 37 ms alone, 3.4 s under hostile pushes). So pushes
are read in worker processes (at most one per push slot, started on first use, replaced after
MAX_TASKS pushes so that one large push's memory is returned): the serving process only
hands over the text and writes back the folded result. Each read has the push's deadline
(folded.Limits.deadline; the monotonic clock is the machine's, shared by both processes),
and the service waits at most a little longer; a worker that died is replaced.
"""

from __future__ import annotations

import ctypes
import logging
import multiprocessing
import resource
import signal
import threading
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass

from webhook.results.bpftrace import collapse_bpftrace
from webhook.stacks import folded

log = logging.getLogger(__name__)

MAX_TASKS = 50
_PR_SET_PDEATHSIG = 1
MEMORY_BYTES = 512 << 20  # address space of one worker: a push over it fails alone (MemoryError)
GRACE_SECONDS = 2.0  # beyond the push's own deadline: handing the text over and back


@dataclass(frozen=True)
class Read:
    """A push's stacks as they are stored: folded text, heaviest first, and its summary."""

    text: str
    samples: int
    hottest: list[tuple[str, int]]


def _start_worker() -> None:
    """In each worker: its memory budget, and its end with the service's process (Linux's
    parent-death signal), never an orphan."""
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BYTES, MEMORY_BYTES))
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass  # not Linux: the pool's own shutdown ends it


def read(kind: str, text: str, limits: folded.Limits) -> Read:
    """`text` in format `kind` (folded or bpftrace) within `limits`; FoldedError or
    folded.TooLarge (raised in the worker, re-raised here) otherwise. Runs in a worker."""
    try:
        stacks = folded.parse(text, limits) if kind == "folded" else \
            collapse_bpftrace(text, limits)
    except MemoryError:
        raise folded.TooLarge(f"more than {MEMORY_BYTES >> 20} MiB to read these stacks; send "
                              "fewer or shorter stacks") from None
    return Read(folded.format_stacks(stacks), folded.total(stacks), folded.hottest(stacks, 10))


class Readers:
    """The worker processes; `read` blocks the calling thread (not the GIL) until done."""

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self.lock = threading.Lock()
        self.pool: ProcessPoolExecutor | None = None

    def _pool(self) -> ProcessPoolExecutor:
        with self.lock:
            if self.pool is None:
                # spawn: the serving process has threads, which a fork would copy mid-lock.
                self.pool = ProcessPoolExecutor(
                    self.workers, mp_context=multiprocessing.get_context("spawn"),
                    initializer=_start_worker, max_tasks_per_child=MAX_TASKS)
            return self.pool

    def read(self, kind: str, text: str, limits: folded.Limits, budget: float) -> Read:
        pool = self._pool()
        try:
            future = pool.submit(read, kind, text, limits)
            return future.result(timeout=budget + GRACE_SECONDS)
        except FutureTimeout:
            raise folded.TooLarge("still reading after the time budget of one push; send "
                                  "fewer or shorter stacks") from None
        except BrokenProcessPool:
            log.error("a stacks reader process died (out of memory?); starting new ones")
            with self.lock:
                if self.pool is pool:
                    self.pool = None
            pool.shutdown(wait=False, cancel_futures=True)
            raise folded.TooLarge("the stacks could not be read within the memory of one "
                                  "push; send fewer or shorter stacks") from None

    def close(self) -> None:
        with self.lock:
            pool, self.pool = self.pool, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
