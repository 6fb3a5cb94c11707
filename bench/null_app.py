"""The null handler: a WSGI app that reads the body and returns an "allowed" review (uid echoed).

Served by the very same gunicorn settings as the webhook (`gunicorn -c
python:webhook.server.gunicorn_conf bench.null_app:app`, same TLS files, workers and threads), it is
the floor the real handler is compared against: what remains is the webhook's own cost.

With BENCH_FIXED_PATCH=1 it answers every review with the patch the real webhook computed for
the first one (uid echoed): a webhook whose review costs nothing but which injects the same
sidecar, so that the apiserver's cost of applying the patch and storing the bigger pod can be
told apart from the review's (bench/e2e.py, mode `fixed-patch`; its pods differ only by name).

`flask_app` is the same null handler as a Flask app (one blueprint, the body read from
`request.stream`, a Response object), served the same way: the difference between the two is
what Flask itself costs per request (docs/performance.md).
"""

from __future__ import annotations

import base64
import json
import os
import threading
from collections.abc import Callable, Iterable
from typing import Any

ALLOWED = json.dumps(
    {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {"uid": "UID", "allowed": True},
    },
    separators=(",", ":"),
).encode()
_UID_AT = b'"request":{"uid":"'


def _uid(body: bytes) -> bytes:
    """The request's uid, which the apiserver wants echoed, without parsing the JSON: both the
    apiserver and bench.pods serialise `uid` first in `request`."""
    start = body.find(_UID_AT)
    if start < 0:
        return b""
    start += len(_UID_AT)
    return body[start : body.find(b'"', start)]

StartResponse = Callable[[str, list[tuple[str, str]]], Any]
_fixed: list[bytes] = []  # the answer with the first review's patch, uid replaced by UID
_fixed_lock = threading.Lock()


def _fixed_patch_answer(body: bytes) -> bytes:
    with _fixed_lock:
        if not _fixed:
            from webhook.admission.mutate import Mutator
            from webhook.config import load_settings

            review = Mutator(load_settings()).review(json.loads(body))
            patch = review.get("response", {}).get("patch") or ""
            base64.b64decode(patch, validate=True)
            _fixed.append(ALLOWED.replace(
                b'"allowed":true', b'"allowed":true,"patchType":"JSONPatch","patch":"'
                + patch.encode() + b'"'))
    return _fixed[0]


def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
    length = int(environ.get("CONTENT_LENGTH") or 0)
    stream = environ["wsgi.input"]
    chunks = []
    while length > 0:  # read the whole body, as any handler must
        chunk = stream.read(min(length, 65536))
        if not chunk:
            break
        chunks.append(chunk)
        length -= len(chunk)
    if environ.get("PATH_INFO") in ("/readyz", "/healthz"):
        body = b'{"status":"ready"}'
    elif environ.get("PATH_INFO") == "/metrics":
        body = b""
    else:
        request = b"".join(chunks)
        answer = _fixed_patch_answer(request) if os.environ.get("BENCH_FIXED_PATCH") else ALLOWED
        body = answer.replace(b"UID", _uid(request), 1)
    start_response(
        "200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
    )
    return [body]


def _flask_app() -> Any:
    from flask import Blueprint, Flask, Response, request

    blueprint = Blueprint("null", __name__)

    @blueprint.route("/mutate", methods=["POST"], provide_automatic_options=False)
    def mutate() -> Response:
        body = request.stream.read()
        return Response(ALLOWED.replace(b"UID", _uid(body), 1), content_type="application/json")

    @blueprint.route("/readyz", methods=["GET"], provide_automatic_options=False)
    def readyz() -> Response:
        return Response(b'{"status":"ready"}', content_type="application/json")

    flask = Flask(__name__)
    flask.register_blueprint(blueprint)
    return flask


flask_app = _flask_app()
