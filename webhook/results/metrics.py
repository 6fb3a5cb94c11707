"""The results service's Prometheus metrics (a registry of its own, served on its metrics port
by webhook.controller.metrics.serve: one process, one writer).

Runs by technique and outcome with the reason; bytes stored; the schedule problems it refused
plans for; the requests it answered (agents' and readers'), by route and status code. The
exporters (webhook.results.export, when configured) add their own by sink and outcome."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

REGISTRY = CollectorRegistry(auto_describe=True)

RUNS = Counter(
    "sidecar_debug_results_runs",
    "Scheduled runs by technique and outcome (planned, stored, failed, expired, deferred, "
    "refused, removed, suspended) and reason (the agent's exit reason, busy-namespace, "
    "technique-unavailable, policy, ...; suspended: the failures' reason, once per cron "
    "minute withheld).",
    ["technique", "outcome", "reason"],
    registry=REGISTRY,
)
STORED_BYTES = Counter(
    "sidecar_debug_results_stored_bytes",
    "Bytes of folded stacks stored (runs pushed by toolsets).",
    registry=REGISTRY,
)
STORE_BYTES = Gauge(
    "sidecar_debug_results_store_bytes",
    "Bytes the stored runs take on the results volume (after the last retention pass).",
    registry=REGISTRY,
)
STORE_RUNS = Gauge(
    "sidecar_debug_results_store_runs",
    "Runs on the results volume (after the last retention pass).",
    registry=REGISTRY,
)
NAMESPACE_BYTES = Gauge(
    "sidecar_debug_results_namespace_bytes",
    "Bytes the runs of a namespace take on the results volume (after its last push or the "
    "last retention pass); at most its quota (results.quotaPerNamespace).",
    ["namespace"],
    registry=REGISTRY,
)
NAMESPACE_RUNS = Gauge(
    "sidecar_debug_results_namespace_runs",
    "Runs of a namespace on the results volume (after its last push or the last retention "
    "pass).",
    ["namespace"],
    registry=REGISTRY,
)
INDEX_REBUILDS = Gauge(
    "sidecar_debug_results_index_rebuilds",
    "Times the store's index was rebuilt from the runs since the service started (missing, "
    "corrupt, another format version, or not writable: kept in memory).",
    registry=REGISTRY,
)
RETENTION_SECONDS = Histogram(
    "sidecar_debug_results_retention_duration_seconds",
    "Time a retention pass took (runs removed, disk use per namespace summed).",
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
    registry=REGISTRY,
)
PUSHES_REFUSED = Counter(
    "sidecar_debug_results_pushes_refused",
    "Pushes refused before their ticket was read, by reason (busy: no push slot free in the "
    "namespace or the service, 429; refused-often: the namespace's pushes were refused too "
    "often within a minute, 429; json-shape: a body of more JSON values than a run has, 413).",
    ["reason"],
    registry=REGISTRY,
)
SCHEDULE_PROBLEMS = Counter(
    "sidecar_debug_results_schedule_problems",
    "Schedule problems met while planning (each counted once per object, reason and detail), "
    "by reason.",
    ["reason"],
    registry=REGISTRY,
)
REQUESTS = Counter(
    "sidecar_debug_results_requests",
    "Requests answered, by route (index, run, download, diff, api, plan, push, static, "
    "other) and status code.",
    ["route", "code"],
    registry=REGISTRY,
)
REQUEST_SECONDS = Histogram(
    "sidecar_debug_results_request_duration_seconds",
    "Time to answer a request, by route.",
    ["route"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0),
    registry=REGISTRY,
)
EVENTS = Counter(
    "sidecar_debug_results_events",
    "Events about scheduled recordings on their pods, by reason (RecordingFailed, "
    "RecordingSuspended) and outcome (posted, rate-limited, exists, failed).",
    ["reason", "outcome"],
    registry=REGISTRY,
)
MIRROR_SYNCS = Counter(
    "sidecar_debug_results_watch_restarts",
    "Times the watch of pods or namespaces was (re)started from a full list, by resource.",
    ["resource"],
    registry=REGISTRY,
)
TOKEN_REVIEWS = Counter(
    "sidecar_debug_results_token_reviews",
    "TokenReviews sent to the apiserver, by caller (agent, reader): an agent's review is "
    "reused until its token expires or its pod is deleted.",
    ["caller"],
    registry=REGISTRY,
)
AGENT_IDENTITIES = Gauge(
    "sidecar_debug_results_agent_identities",
    "Agents' reviewed tokens held in memory (one per toolset, two across a token rotation).",
    registry=REGISTRY,
)
