"""Optional export of every stored run to Grafana Pyroscope, Parca and OpenTelemetry (OTLP
profiles over HTTP or gRPC) (docs/exports.md).

The results service (webhook.results.service, the one writer of the store) calls `export(run)`
after each run is stored; the call only puts
the run in each sink's queue and returns. A thread per sink sends (settings.py: where and with
which credentials; requests.py: the request shapes; send.py: HTTP; grpc_send.py: OTLP/gRPC),
retrying with a doubling wait, so a slow or dead sink never delays storing or serving: its
queue fills, and what does not fit is dropped and counted
(sidecar_debug_exports_total{outcome="dropped"}).

    exporters = Exporters.from_settings(ExportSettings.from_environ(os.environ), registry=...)
    ...
    run = store.save(...)
    exporters.export(run)
"""

from __future__ import annotations

import logging
import os
import queue
import sys
import threading
import time
from collections.abc import Callable, Mapping

from prometheus_client import REGISTRY, CollectorRegistry

from webhook.results.export import metrics, requests, send
from webhook.results.export.settings import (
    CredentialsError,
    ExportSettings,
    ExportSettingsError,
    SinkSettings,
)
from webhook.results.store import Run, StoreError

__all__ = ["Exporters", "ExportSettings", "ExportSettingsError", "SinkSettings"]

log = logging.getLogger("sidecar-debug.export")

Sender = Callable[[requests.Request, float, SinkSettings], send.Answer]


def _send(request: requests.Request, timeout: float, sink: SinkSettings) -> send.Answer:
    if request.method == "GRPC":
        from webhook.results.export import grpc_send  # grpcio loads only with a gRPC sink

        return grpc_send.send(request, timeout=timeout, sink=sink)
    try:
        context = sink.tls_context()
    except CredentialsError as error:
        return send.Answer(False, "credentials", False, str(error))
    answer = send.send(request, timeout=timeout, context=context)
    if answer.ok and sink.kind == "otlp":
        return send.otlp_outcome(answer, answer.body)
    return answer


class _Sink:
    """One sink's bounded queue and the thread that empties it."""

    def __init__(self, sink: SinkSettings, settings: ExportSettings,
                 measures: metrics.ExportMetrics, sender: Sender,
                 wait: Callable[[threading.Event, float], bool]) -> None:
        self.sink = sink
        self.settings = settings
        self.metrics = measures
        self.sender = sender
        self.wait = wait
        self.queue: queue.Queue[tuple[Run, float] | None] = queue.Queue(settings.queue_size)
        self.stopping = threading.Event()
        self.thread: threading.Thread | None = None
        self.pid = 0
        self.lock = threading.Lock()

    def put(self, run: Run) -> bool:
        self._start()
        try:
            self.queue.put_nowait((run, time.monotonic()))
        except queue.Full:
            self.metrics.exports.labels(sink=self.sink.kind, outcome="dropped").inc()
            log.warning("export to %s: %d runs are waiting; %s is not exported (the sink is "
                        "slow or down: see sidecar_debug_export_attempts_total)",
                        self.sink.kind, self.settings.queue_size, run.id)
            return False
        self.metrics.queued.labels(sink=self.sink.kind).inc()
        return True

    def _start(self) -> None:
        # A thread does not survive fork: a gunicorn worker starts its own on first use.
        with self.lock:
            if self.thread is not None and self.thread.is_alive() and self.pid == os.getpid():
                return
            self.pid = os.getpid()
            self.thread = threading.Thread(target=self._loop, name=f"export-{self.sink.kind}",
                                           daemon=True)
            self.thread.start()

    def stop(self, timeout: float) -> None:
        self.stopping.set()
        with self.lock:
            thread = self.thread
        if thread is not None and thread.is_alive():
            try:
                self.queue.put_nowait(None)  # wakes the thread if it waits for work
            except queue.Full:
                pass
            thread.join(timeout)

    def _loop(self) -> None:
        while not self.stopping.is_set():
            item = self.queue.get()
            if item is None:
                return
            run, queued_at = item
            try:
                self._export(run, queued_at)
            except Exception:  # a bug: say so, keep exporting the next runs
                log.exception("export to %s of %s failed", self.sink.kind, run.id)
                self.metrics.exports.labels(sink=self.sink.kind, outcome="failed").inc()
            finally:
                self.metrics.queued.labels(sink=self.sink.kind).dec()

    def _export(self, run: Run, queued_at: float) -> None:
        kind = self.sink.kind
        try:
            stacks = run.stacks()
        except (StoreError, OSError) as error:
            self.metrics.exports.labels(sink=kind, outcome="unreadable").inc()
            log.warning("export to %s: %s cannot be read any more: %s", kind, run.id, error)
            return
        request = requests.BUILDERS[kind](self.sink, run, stacks)
        backoff = self.settings.backoff
        for attempt in range(1, self.settings.attempts + 1):
            try:
                headers = self.sink.headers()
            except CredentialsError as error:
                answer = send.Answer(False, "credentials", False, str(error))
            else:
                answer = self.sender(requests.Request(request.method, request.url,
                                                  {**request.headers, **headers}, request.body),
                                     self.sink.timeout, self.sink)
            self.metrics.attempts.labels(sink=kind, result=answer.result).inc()
            if answer.ok:
                if answer.message:
                    log.warning("export to %s: %s: %s", kind, run.id, answer.message)
                self.metrics.exports.labels(sink=kind, outcome="sent").inc()
                self.metrics.delay.labels(sink=kind).observe(time.monotonic() - queued_at)
                return
            if not answer.retry:
                self.metrics.exports.labels(sink=kind, outcome="rejected").inc()
                log.error("export to %s: %s refused: %s", kind, run.id, answer.message)
                return
            if attempt == self.settings.attempts:
                break
            delay = min(answer.retry_after if answer.retry_after is not None else backoff,
                        self.settings.max_backoff)
            log.info("export to %s: %s: %s; attempt %d of %d in %g s", kind, run.id,
                     answer.message, attempt + 1, self.settings.attempts, delay)
            if self.wait(self.stopping, delay):
                break  # stopping: the run counts as failed
            backoff = min(backoff * 2, self.settings.max_backoff)
        self.metrics.exports.labels(sink=kind, outcome="failed").inc()
        log.error("export to %s: %s not exported after %d attempts: %s", kind, run.id,
                  attempt, answer.message)


class Exporters:
    """Every configured sink; `export(run)` never blocks and never raises for a sink's sake."""

    def __init__(self, settings: ExportSettings, *, registry: CollectorRegistry = REGISTRY,
                 sender: Sender = _send,
                 wait: Callable[[threading.Event, float], bool] = threading.Event.wait) -> None:
        self.settings = settings
        measures = metrics.for_registry(registry)
        self._sinks = [_Sink(sink, settings, measures, sender, wait) for sink in settings.sinks]

    @classmethod
    def from_settings(cls, settings: ExportSettings, *,
                      registry: CollectorRegistry = REGISTRY) -> Exporters:
        return cls(settings, registry=registry)

    @classmethod
    def from_environ(cls, environ: Mapping[str, str], *,
                     registry: CollectorRegistry = REGISTRY) -> Exporters:
        """From SIDECAR_DEBUG_EXPORT (the chart's results.export as JSON); none configured
        gives an Exporters that does nothing. ExportSettingsError: a value is wrong."""
        return cls(ExportSettings.from_environ(environ), registry=registry)

    def __bool__(self) -> bool:
        return bool(self._sinks)

    @property
    def sinks(self) -> list[str]:
        return [sink.sink.kind for sink in self._sinks]

    def export(self, run: Run) -> None:
        for sink in self._sinks:
            sink.put(run)

    def close(self, timeout: float = 5.0) -> None:
        """Stop the threads and close gRPC channels; runs still queued are not exported."""
        for sink in self._sinks:
            sink.stop(timeout)
        grpc_send = sys.modules.get("webhook.results.export.grpc_send")
        if grpc_send is not None:  # loaded: some sink spoke gRPC
            for sink in self._sinks:
                grpc_send.close(sink.sink)

