"""The thin HTTP layer: content type, body size, JSON. The work is `Mutator.review(body)`.

Hostile input gets a 4xx with a JSON reason (or an AdmissionReview answer), never a 5xx or a
traceback: wrong content type 415, empty body 400, too large 413, invalid JSON 400.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

from flask import Flask, Response, request

from webhook import metrics
from webhook.admission import Review
from webhook.config import Settings
from webhook.mutate import Mutator
from webhook.policy_api import PolicyEngine

log = logging.getLogger("sidecar_debug.http")
JSON = "application/json"

# A validating review of namespace changes (the policy's namespace-label gate), if enabled.
NamespaceReviewer = Callable[[Any], Review]


def _json(payload: Any, status: int = 200) -> Response:
    return Response(json.dumps(payload, separators=(",", ":")), status=status, mimetype=JSON)


def _refuse(status: int, reason: str) -> Response:
    metrics.HTTP_ERRORS.labels(str(status)).inc()
    log.warning(
        "refused request: %s", reason, extra={"fields": {"status": status, "path": request.path}}
    )
    return _json({"error": reason, "status": status}, status)


def _drain(limit: int) -> None:
    """Read and drop what remains of an oversized body (up to 4x the limit) so that the client,
    still sending, gets to read our 413 instead of a reset connection."""
    remaining = 4 * limit
    while remaining > 0:
        chunk = request.stream.read(min(65536, remaining))
        if not chunk:
            return
        remaining -= len(chunk)


def _read_review_body(settings: Settings) -> Any | Response:
    """The parsed JSON body, or the 4xx Response explaining why there is none."""
    mimetype = (request.mimetype or "").lower()
    if mimetype != JSON:
        return _refuse(415, f"content type must be {JSON}, got {mimetype or 'none'!r}")
    limit = settings.max_request_bytes
    length = request.content_length
    if length is not None and length > limit:
        _drain(limit)
        return _refuse(413, f"body of {length} bytes exceeds the {limit}-byte limit")
    raw = request.stream.read(limit + 1)
    if len(raw) > limit:
        _drain(limit)
        return _refuse(413, f"body exceeds the {limit}-byte limit")
    if not raw.strip():
        return _refuse(400, "empty body; expected an AdmissionReview JSON object")
    try:
        return json.loads(raw)
    except (ValueError, RecursionError) as exc:
        return _refuse(400, f"body is not valid JSON: {exc}")


def create_app(
    settings: Settings,
    policy: PolicyEngine | None = None,
    namespace_reviewer: NamespaceReviewer | None = None,
    readiness: Callable[[], str | None] | None = None,
) -> Flask:
    """`readiness` returns None when ready, else why not (e.g. no serving certificate yet)."""
    app = Flask("sidecar_debug")
    mutator = Mutator(settings, policy)
    app.config["MUTATOR"] = mutator

    @app.post("/mutate")
    def mutate() -> Response:
        body = _read_review_body(settings)
        if isinstance(body, Response):
            return body
        return _json(mutator.review(body))

    @app.post("/validate-namespace")
    def validate_namespace() -> Response:
        if namespace_reviewer is None:
            return _refuse(404, "the namespace-label gate is not enabled on this webhook")
        body = _read_review_body(settings)
        if isinstance(body, Response):
            return body
        return _json(namespace_reviewer(body))

    @app.get("/healthz")
    def healthz() -> Response:
        return _json({"status": "ok"})

    @app.get("/readyz")
    def readyz() -> Response:
        problem = readiness() if readiness else None
        if problem:
            return _json({"status": "not ready", "reason": problem}, 503)
        return _json({"status": "ready"})

    @app.get("/metrics")
    def metrics_endpoint() -> Response:
        body, content_type = metrics.render()
        return Response(body, mimetype=content_type.split(";")[0], content_type=content_type)

    @app.errorhandler(404)
    def not_found(_: Exception) -> Response:
        return _refuse(
            404,
            f"no such endpoint {request.method} {request.path}; the webhook serves POST /mutate",
        )

    @app.errorhandler(405)
    def wrong_method(_: Exception) -> Response:
        return _refuse(405, f"method {request.method} not allowed on {request.path}")

    @app.errorhandler(Exception)
    def unexpected(exc: Exception) -> Response:
        # Last line of defence: log the traceback, answer 400 rather than a 5xx.
        log.exception("unhandled error on %s", request.path)
        return _refuse(400, f"request could not be processed: {type(exc).__name__}")

    return app
