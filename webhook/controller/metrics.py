"""The controller's Prometheus metrics and its small HTTP server (/metrics, /healthz).

A registry of its own: the controller process shows its metrics only (the webhook's review
metrics live in webhook.metrics, in the webhook's processes).
"""

from __future__ import annotations

import http.server
import threading
from collections.abc import Callable

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    generate_latest,
)

REGISTRY = CollectorRegistry(auto_describe=True)

LEADER = Gauge(
    "sidecar_debug_controller_leader",
    "1 while this replica holds the controller's Lease (it alone acts), else 0.",
    registry=REGISTRY,
)
SESSIONS = Gauge(
    "sidecar_debug_sessions",
    "Debug sessions the leader saw in its last pass, by kind (injected, standby, attached) and "
    "state (active, overdue, unlimited).",
    ["kind", "state"],
    registry=REGISTRY,
)
ACTIONS = Counter(
    "sidecar_debug_session_expiry_actions",
    "What the controller did with sessions past maxSessionDuration, by action (report, evict, "
    "stop) and result (reported, evicted, blocked, stopped, unsupported, gone, failed).",
    ["action", "result"],
    registry=REGISTRY,
)
SCHEDULE_PROBLEMS = Counter(
    "sidecar_debug_controller_schedule_problems",
    "Schedule problems the leader reported with an Event (once per object, reason and "
    "detail), by reason (ScheduleInvalid, ScheduleTechniqueUnavailable, ScheduleRefusedByPolicy, "
    "ScheduleNoResultsAgent).",
    ["reason"],
    registry=REGISTRY,
)
PASSES = Counter(
    "sidecar_debug_controller_passes",
    "Expiry passes the leader ran, by result (ok, failed).",
    ["result"],
    registry=REGISTRY,
)


def serve(address: str, port: int, healthy: Callable[[], bool],
          registry: CollectorRegistry = REGISTRY) -> http.server.HTTPServer:
    """Serve /metrics and /healthz (200 while `healthy()`, else 503) in a daemon thread (the
    results service serves its own registry the same way)."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the http.server API
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                status, body, kind = 200, generate_latest(registry), CONTENT_TYPE_LATEST
            elif path in ("/healthz", "/readyz"):
                ok = healthy()
                status, body, kind = (200 if ok else 503), (b"ok\n" if ok else b"stalled\n"), \
                    "text/plain"
            else:
                status, body, kind = 404, b"not found\n", "text/plain"
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            return  # probes every few seconds: not worth a log line

    server = http.server.ThreadingHTTPServer((address, port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
    return server
