"""Prometheus metrics. Under gunicorn, PROMETHEUS_MULTIPROC_DIR makes every worker's counts visible
on /metrics whichever worker answers (`sidecar-debug serve` sets it up)."""

from __future__ import annotations

import os

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
    multiprocess,
)

REVIEWS = Counter(
    "sidecar_debug_reviews_total",
    "Admission reviews answered, by decision (injected, skipped, denied, ignored, error), reason.",
    ["decision", "reason"],
)
LATENCY = Histogram(
    "sidecar_debug_review_duration_seconds",
    "Time to answer one admission review, from parsed body to response.",
    buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
)
GUARD_REVIEWS = Counter(
    "sidecar_debug_guard_reviews_total",
    "Reviews of the guard (/validate-pods), by decision (allowed, denied) and reason.",
    ["decision", "reason"],
)
GUARD_LATENCY = Histogram(
    "sidecar_debug_guard_review_duration_seconds",
    "Time to answer one review of the guard, from parsed body to response.",
    buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
)
POLICY_RELOADS = Counter(
    "sidecar_debug_policy_reloads_total",
    "Reloads of changed policy files, by outcome (reloaded; failed: the last good policy stays "
    "in force, the log says which file and line).",
    ["outcome"],
)
HTTP_ERRORS = Counter(
    "sidecar_debug_http_errors_total",
    "Requests refused before review (bad content type, size, JSON), by status code.",
    ["code"],
)


def render() -> tuple[bytes, str]:
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
        return generate_latest(registry), CONTENT_TYPE_LATEST
    return generate_latest(), CONTENT_TYPE_LATEST
