"""The null handler: a WSGI app that reads the body and returns an "allowed" review (uid echoed).

Served by the very same gunicorn settings as the webhook (`gunicorn -c
python:webhook.gunicorn_conf bench.null_app:app`, same TLS files, workers and threads), it is
the floor the real handler is compared against: what remains is the webhook's own cost.
"""

from __future__ import annotations

import json
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
        body = ALLOWED.replace(b"UID", _uid(b"".join(chunks)), 1)
    start_response(
        "200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
    )
    return [body]
