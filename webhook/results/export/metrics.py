"""Export metrics, registered in the registry of the process that exports (the results
service's, or the controller's while it still stores runs)."""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram

OUTCOMES = ("sent", "rejected", "failed", "dropped", "unreadable")


@dataclass(frozen=True)
class ExportMetrics:
    exports: Counter
    attempts: Counter
    queued: Gauge
    delay: Histogram


# Weak keys, not id(registry): a registry freed and a new one at the same address would get
# the old one's metrics (a test's registry then stayed empty).
_BY_REGISTRY: weakref.WeakKeyDictionary[CollectorRegistry, ExportMetrics] = (
    weakref.WeakKeyDictionary())
_LOCK = threading.Lock()


def for_registry(registry: CollectorRegistry = REGISTRY) -> ExportMetrics:
    """The export metrics of `registry`, created on first use (a registry refuses a name
    twice)."""
    with _LOCK:
        found = _BY_REGISTRY.get(registry)
        if found is None:
            found = ExportMetrics(
                exports=Counter(
                    "sidecar_debug_exports",
                    "Runs handed to an export sink, by sink (pyroscope, parca, otlp) and outcome: "
                    "sent; rejected (the sink refused it: a 4xx other than 408/429, a redirect, "
                    "TLS, an OTLP partial success or gRPC status not retried); "
                    "failed (no success within the attempts); dropped (the sink's queue was "
                    "full); unreadable (the run was gone or damaged when its turn came).",
                    ["sink", "outcome"], registry=registry),
                attempts=Counter(
                    "sidecar_debug_export_attempts",
                    "Requests to export sinks, by sink and result (the HTTP status code, or ok "
                    "and the gRPC status in lower case; timeout, connection, tls, credentials; "
                    "OTLP: partial, not_otlp).",
                    ["sink", "result"], registry=registry),
                queued=Gauge(
                    "sidecar_debug_export_queue_length",
                    "Runs waiting for an export sink (the one being sent included), by sink.",
                    ["sink"], registry=registry, multiprocess_mode="livesum"),
                delay=Histogram(
                    "sidecar_debug_export_delay_seconds",
                    "From handing a run to a sink to the sink's success, retries included.",
                    ["sink"], registry=registry,
                    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900)),
            )
            _BY_REGISTRY[registry] = found
        return found
