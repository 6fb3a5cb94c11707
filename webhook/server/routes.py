"""The thin HTTP layer: content type, body size, JSON. The work is `Mutator.review(body)`.

A plain WSGI application: five fixed endpoints need no framework, and Flask's per-request
machinery (request context, request and response objects) cost as much CPU as the review itself
(docs/performance.md).

Hostile input gets a 4xx with a JSON reason (or an AdmissionReview answer), never a 5xx or a
traceback: wrong content type 415, empty body 400, too large 413, invalid JSON 400, unknown path
404, wrong method 405.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from http import HTTPStatus
from typing import Any

from webhook import jsonio, metrics
from webhook.admission.mutate import Mutator
from webhook.admission.review import Review
from webhook.config import Settings
from webhook.policy.api import PolicyEngine

log = logging.getLogger(__name__)
JSON = "application/json"

# A validating review of namespace changes (the policy's namespace-label gate), if enabled.
NamespaceReviewer = Callable[[Any], Review]
Environ = dict[str, Any]
StartResponse = Callable[..., Any]
# What a handler answers: status code, content type, body.
Answer = tuple[int, str, bytes]


class Refused(Exception):
    """A request answered with a 4xx before review; `reason` says why and what to send."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


def _json(payload: Any, status: int = 200) -> Answer:
    return status, JSON, jsonio.dumps(payload)


def _drain(stream: Any, limit: int) -> None:
    """Read and drop what remains of an oversized body (up to 4x the limit) so that the client,
    still sending, gets to read our 413 instead of a reset connection."""
    remaining = 4 * limit
    while remaining > 0:
        chunk = stream.read(min(65536, remaining))
        if not chunk:
            return
        remaining -= len(chunk)


def _content_length(environ: Environ) -> int | None:
    try:
        return int(environ.get("CONTENT_LENGTH") or "")
    except ValueError:
        return None


def read_review_body(environ: Environ, settings: Settings) -> Any:
    """The parsed JSON body of a review request; raises Refused saying why there is none."""
    mimetype = str(environ.get("CONTENT_TYPE") or "").split(";", 1)[0].strip().lower()
    if mimetype != JSON:
        raise Refused(415, f"content type must be {JSON}, got {mimetype or 'none'!r}")
    limit = settings.max_request_bytes
    stream = environ["wsgi.input"]
    length = _content_length(environ)
    if length is not None and length > limit:
        _drain(stream, limit)
        raise Refused(413, f"body of {length} bytes exceeds the {limit}-byte limit")
    raw = stream.read(limit + 1)
    if len(raw) > limit:
        _drain(stream, limit)
        raise Refused(413, f"body exceeds the {limit}-byte limit")
    if not raw.strip():
        raise Refused(400, "empty body; expected an AdmissionReview JSON object")
    try:
        return jsonio.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise Refused(400, f"body is not valid JSON: {exc}") from None


class WebhookApp:
    """The WSGI application gunicorn serves (webhook.server.wsgi:app)."""

    def __init__(
        self,
        settings: Settings,
        policy: PolicyEngine | None = None,
        namespace_reviewer: NamespaceReviewer | None = None,
        readiness: Callable[[], str | None] | None = None,
    ) -> None:
        """`readiness` returns None when ready, else why not (e.g. no serving certificate)."""
        self.settings = settings
        self.mutator = Mutator(settings, policy)
        self.namespace_reviewer = namespace_reviewer
        self.readiness = readiness
        self.routes: dict[tuple[str, str], Callable[[Environ], Answer]] = {
            ("POST", "/mutate"): self.mutate,
            ("POST", "/validate-namespace"): self.validate_namespace,
            ("GET", "/healthz"): self.healthz,
            ("GET", "/readyz"): self.readyz,
            ("GET", "/metrics"): self.metrics,
        }

    def __call__(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        method = str(environ.get("REQUEST_METHOD") or "GET").upper()
        path = str(environ.get("PATH_INFO") or "/")
        headers: list[tuple[str, str]] = []
        try:
            handler = self.routes.get(("GET" if method == "HEAD" else method, path))
            if handler is None:
                allowed = {known for known, known_path in self.routes if known_path == path}
                if not allowed:
                    raise Refused(
                        404, f"no such endpoint {method} {path}; the webhook serves POST /mutate"
                    )
                if "GET" in allowed:
                    allowed.add("HEAD")
                headers.append(("Allow", ", ".join(sorted(allowed))))
                raise Refused(405, f"method {method} not allowed on {path}")
            status, content_type, body = handler(environ)
        except Refused as refusal:
            status, content_type, body = self.refuse(refusal, method, path)
        except Exception as exc:  # noqa: BLE001 - last line of defence: a 400, never a 5xx
            log.exception("unhandled error on %s %s", method, path)
            bug = Refused(400, f"request could not be processed: {type(exc).__name__}")
            status, content_type, body = self.refuse(bug, method, path)
        headers += [("Content-Type", content_type), ("Content-Length", str(len(body)))]
        start_response(f"{status} {HTTPStatus(status).phrase}", headers)
        return [b"" if method == "HEAD" else body]

    @staticmethod
    def refuse(refusal: Refused, method: str, path: str) -> Answer:
        metrics.HTTP_ERRORS.labels(str(refusal.status)).inc()
        log.warning(
            "refused request: %s",
            refusal.reason,
            extra={"fields": {"status": refusal.status, "method": method, "path": path}},
        )
        return _json({"error": refusal.reason, "status": refusal.status}, refusal.status)

    def mutate(self, environ: Environ) -> Answer:
        return _json(self.mutator.review(read_review_body(environ, self.settings)))

    def validate_namespace(self, environ: Environ) -> Answer:
        if self.namespace_reviewer is None:
            raise Refused(404, "the namespace-label gate is not enabled on this webhook")
        return _json(self.namespace_reviewer(read_review_body(environ, self.settings)))

    def healthz(self, environ: Environ) -> Answer:
        return _json({"status": "ok"})

    def readyz(self, environ: Environ) -> Answer:
        problem = self.readiness() if self.readiness else None
        if problem:
            return _json({"status": "not ready", "reason": problem}, 503)
        return _json({"status": "ready"})

    def metrics(self, environ: Environ) -> Answer:
        body, content_type = metrics.render()
        return 200, content_type, body


def create_app(
    settings: Settings,
    policy: PolicyEngine | None = None,
    namespace_reviewer: NamespaceReviewer | None = None,
    readiness: Callable[[], str | None] | None = None,
) -> WebhookApp:
    return WebhookApp(settings, policy, namespace_reviewer, readiness)
