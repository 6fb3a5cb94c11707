"""gunicorn's gthread worker, accepting a new connection only while one of its threads is idle.

The apiserver keeps its connections to a webhook open and sends every review over them, so which
worker process answers is settled when a connection is accepted. Stock gthread workers accept
whatever arrives while they have room for a thousand connections; a burst of new connections
lands on whichever worker wakes first. Measured on 2 cores with 8 connections, one worker got
every one of them in 4 of 10 runs: half the machine idle, less than half the throughput, about
three times the latency (docs/performance.md, "Worker class and count"). This worker stops
accepting while all its threads are busy, so a busy worker leaves new connections to an idle
one; connections it already holds are served as before.

Everything here runs on the worker's main thread (accept, enqueue and finish callbacks all run
from its event loop), so the in-flight count needs no lock.
"""

from __future__ import annotations

from typing import Any

from gunicorn.workers.gthread import ThreadWorker


class BalancedThreadWorker(ThreadWorker):  # type: ignore[misc]  # gunicorn ships no types
    in_flight = 0

    def set_accept_enabled(self, enabled: bool) -> None:
        # The event loop asks for accepting whenever it has room for connections; only say
        # yes while a thread is free to take the new one.
        super().set_accept_enabled(enabled and self.in_flight < self.cfg.threads)

    def enqueue_req(self, conn: Any) -> None:
        self.in_flight += 1
        if self.in_flight >= self.cfg.threads:
            super().set_accept_enabled(False)
        super().enqueue_req(conn)

    def finish_request(self, conn: Any, fs: Any) -> None:
        # The event loop re-enables accepting on its next turn (set_accept_enabled above).
        self.in_flight -= 1
        super().finish_request(conn, fs)
