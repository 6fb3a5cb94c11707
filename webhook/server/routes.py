"""The thin HTTP layer: content type, body size, JSON. The work is `Mutator.review(body)` (and
the guard's `PodGuard.review(body)`, the namespace gate's review).

One Flask blueprint; webhook.server.app.create_app registers it. Hostile input gets a 4xx with a
JSON reason (or an AdmissionReview answer), never a 5xx or a traceback: wrong content type 415,
empty body 400, too large 413, invalid JSON 400, unknown path 404, wrong method 405 with
`Allow`. The review is parsed and answered with orjson (webhook.wire.jsonio), not Flask's JSON.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from flask import Blueprint, Response, current_app, request
from werkzeug.exceptions import (
    BadRequest,
    HTTPException,
    NotFound,
    RequestEntityTooLarge,
    UnsupportedMediaType,
)

from webhook import metrics
from webhook.admission.mutate import Mutator
from webhook.admission.review import Review
from webhook.config import Settings
from webhook.wire import jsonio

log = logging.getLogger(__name__)
JSON = "application/json"
EXTENSION = "sidecar_debug"  # the key of WebhookState in app.extensions

# A validating review of namespace changes (the policy's namespace-label gate and the guard
# label's), if enabled; and the guard's review of pods (webhook.admission.guard.PodGuard.review).
NamespaceReviewer = Callable[[Any], Review]
PodValidator = Callable[[Any], Review]

blueprint = Blueprint("webhook", __name__)


@dataclass(frozen=True)
class WebhookState:
    """What the views need, kept in `app.extensions[EXTENSION]` by create_app."""

    settings: Settings
    mutator: Mutator
    namespace_reviewer: NamespaceReviewer | None = None
    # The guard label's gate (webhook.admission.namespace.review_namespace_guard).
    namespace_guard_reviewer: NamespaceReviewer | None = None
    pod_validator: PodValidator | None = None
    # The name label's gate (webhook.admission.namespace.review_namespace_name).
    namespace_name_reviewer: NamespaceReviewer | None = None
    # None when ready, else why not (e.g. no serving certificate).
    readiness: Callable[[], str | None] | None = None


def _state() -> WebhookState:
    state: WebhookState = current_app.extensions[EXTENSION]
    return state


def _json(payload: Any, status: int = 200) -> Response:
    return Response(jsonio.dumps(payload), status, content_type=JSON)


def _read_all(stream: Any, limit: int) -> bytes:
    """Up to `limit` + 1 bytes of the body: one more than allowed tells "too large"."""
    chunks: list[bytes] = []
    size = 0
    while size <= limit:
        chunk = stream.read(limit + 1 - size)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def read_review_body(settings: Settings) -> Any:
    """The parsed JSON body of a review request; raises a 4xx saying why there is none.

    An oversized body is not read: gunicorn's worker (webhook/server/gunicorn_worker.py)
    discards the rest after the answer and closes the connection."""
    mimetype = request.mimetype
    if mimetype != JSON:
        raise UnsupportedMediaType(f"content type must be {JSON}, got {mimetype or 'none'!r}")
    limit = settings.max_request_bytes
    length = request.content_length
    if length is not None and length > limit:
        raise RequestEntityTooLarge(
            f"body of {length} bytes exceeds the {limit}-byte limit (maxRequestBytes)"
        )
    raw = _read_all(request.stream, limit)
    if len(raw) > limit:
        raise RequestEntityTooLarge(f"body exceeds the {limit}-byte limit (maxRequestBytes)")
    if not raw.strip():
        raise BadRequest("empty body; expected an AdmissionReview JSON object")
    try:
        return jsonio.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise BadRequest(f"body is not valid JSON: {exc}") from None


def _route(rule: str, method: str) -> Callable[[Callable[[], Response]], Callable[[], Response]]:
    # No automatic OPTIONS: every other method gets a 405 naming the one allowed.
    return blueprint.route(rule, methods=[method], provide_automatic_options=False)


@_route("/mutate", "POST")
def mutate() -> Response:
    state = _state()
    return _json(state.mutator.review(read_review_body(state.settings)))


@_route("/validate-namespace", "POST")
def validate_namespace() -> Response:
    state = _state()
    if state.namespace_reviewer is None:
        raise NotFound("the namespace-label gate is not enabled on this webhook")
    return _json(state.namespace_reviewer(read_review_body(state.settings)))


@_route("/validate-namespace-guard", "POST")
def validate_namespace_guard() -> Response:
    state = _state()
    if state.namespace_guard_reviewer is None:
        raise NotFound("the guard's namespace-label gate is not enabled on this webhook")
    return _json(state.namespace_guard_reviewer(read_review_body(state.settings)))


@_route("/validate-namespace-name", "POST")
def validate_namespace_name() -> Response:
    state = _state()
    if state.namespace_name_reviewer is None:
        raise NotFound("the namespace name label's gate is not enabled on this webhook")
    return _json(state.namespace_name_reviewer(read_review_body(state.settings)))


@_route("/validate-pods", "POST")
def validate_pods() -> Response:
    state = _state()
    if state.pod_validator is None:
        raise NotFound("the guard is not enabled on this webhook")
    return _json(state.pod_validator(read_review_body(state.settings)))


@_route("/healthz", "GET")
def healthz() -> Response:
    return _json({"status": "ok"})


@_route("/readyz", "GET")
def readyz() -> Response:
    readiness = _state().readiness
    problem = readiness() if readiness else None
    if problem:
        return _json({"status": "not ready", "reason": problem}, 503)
    return _json({"status": "ready"})


@_route("/metrics", "GET")
def metrics_endpoint() -> Response:
    body, content_type = metrics.render()
    return Response(body, 200, content_type=content_type)


# --- refusals: a JSON body saying why, and the refusal logged and counted ------------------


def _refuse(status: int, reason: str, headers: list[tuple[str, str]] | None = None) -> Response:
    metrics.HTTP_ERRORS.labels(str(status)).inc()
    log.warning(
        "refused request: %s",
        reason,
        extra={"fields": {"status": status, "method": request.method, "path": request.path}},
    )
    response = _json({"error": reason, "status": status}, status)
    for name, value in headers or ():
        response.headers[name] = value
    return response


def _reason(error: HTTPException) -> str:
    return str(error.description or error.name)


@blueprint.app_errorhandler(400)
@blueprint.app_errorhandler(413)
@blueprint.app_errorhandler(415)
def bad_request(error: HTTPException) -> Response:
    return _refuse(error.code or 400, _reason(error))


@blueprint.app_errorhandler(404)
def not_found(error: HTTPException) -> Response:
    if error.description != NotFound.description:  # raised by a view, with its own reason
        return _refuse(404, _reason(error))
    return _refuse(
        404,
        f"no such endpoint {request.method} {request.path}; the webhook serves POST /mutate "
        "and /validate-pods",
    )


@blueprint.app_errorhandler(405)
def method_not_allowed(error: HTTPException) -> Response:
    allowed = sorted(getattr(error, "valid_methods", None) or ())
    return _refuse(
        405,
        f"method {request.method} not allowed on {request.path}; use {' or '.join(allowed)}",
        [("Allow", ", ".join(allowed))],
    )


@blueprint.app_errorhandler(HTTPException)
def other_http_error(error: HTTPException) -> Response:
    # Anything else werkzeug refuses (e.g. a malformed header): its status, our JSON shape.
    return _refuse(error.code or 400, _reason(error))


@blueprint.app_errorhandler(Exception)
def bug(error: Exception) -> Response:
    # The last line of defence: a bug answers 400 with its type, never a 500 or a traceback
    # on the wire (the traceback goes to the log).
    log.exception("unhandled error on %s %s", request.method, request.path)
    return _refuse(400, f"request could not be processed: {type(error).__name__}")


