"""Hostile input never gets a 5xx or a traceback: the table runs through the Flask app in
process (Flask's test client) and once through the real server (`sidecar-debug serve`: gunicorn
over TLS with the project's worker)."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from typing import Any

import pytest
from flask import Flask

from tests.unit.core_helpers import admission_review, default_settings, settings_with
from tests.unit.server.serving import Served, post, serve
from webhook.policy.api import AllowAll
from webhook.server.app import create_app
from webhook.server.routes import EXTENSION

POD = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "app", "image": "busybox"}]}}
UID = "0df28fbd-5f5f-11e8-bc74-36e6bb280816"
JSON = "application/json"


def _review(**request: Any) -> bytes:
    body = admission_review(POD)
    body["request"]["uid"] = UID
    body["request"].update(request)
    return json.dumps(body).encode()


# (name, content type, body, expected HTTP status, expected text in the answer)
HOSTILE: list[tuple[str, str, bytes, int, str]] = [
    ("wrong content type", "text/plain", b"{}", 415, "content type"),
    ("form content type", "application/x-www-form-urlencoded", b"a=b", 415, "content type"),
    ("empty body", JSON, b"", 400, "empty body"),
    ("whitespace body", JSON, b"  \n ", 400, "empty body"),
    ("invalid json", JSON, b"{not json", 400, "not valid JSON"),
    ("binary garbage", JSON, bytes(range(256)), 400, "not valid JSON"),
    ("over the size limit", JSON, b"[" + b"1," * (2 * 1024 * 1024) + b"1]", 413, "limit"),
    ("deeply nested json", JSON, b"[" * 100000 + b"]" * 100000, 400, "not valid JSON"),
    ("json array", JSON, b"[1,2]", 200, "not an AdmissionReview"),
    ("json string", JSON, b'"hello"', 200, "not an AdmissionReview"),
    (
        "no request",
        JSON,
        b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}',
        200,
        "has no request",
    ),
    (
        "wrong api version",
        JSON,
        b'{"apiVersion":"v9","kind":"AdmissionReview","request":{}}',
        200,
        "not handled",
    ),
    (
        "not a pod",
        JSON,
        _review(kind={"group": "apps", "version": "v1", "kind": "Deployment"}),
        200,
        "is not a Pod",
    ),
    ("update operation", JSON, _review(operation="UPDATE"), 200, "not handled"),
    ("pod without spec", JSON, _review(object={"metadata": {}}), 200, "no Pod object"),
    ("object is a list", JSON, _review(object=[1, 2]), 200, ""),
    ("containers not a list", JSON, _review(object={"spec": {"containers": "x"}}), 200, ""),
    (
        "metadata not a map",
        JSON,
        _review(object={"metadata": 5, "spec": {"containers": []}}),
        200,
        "",
    ),
    (
        "annotations not a map",
        JSON,
        _review(object={"metadata": {"annotations": ["x"]}, "spec": {"containers": []}}),
        200,
        "",
    ),
]


def _check(status: int, body: bytes, expected_status: int, expected_text: str) -> None:
    assert status == expected_status, body[:300]
    assert status < 500
    text = body.decode(errors="replace")
    assert "Traceback" not in text
    assert expected_text in text
    answer = json.loads(body)
    if status == 200:
        # An AdmissionReview answer; whether a malformed pod is admitted or refused (with a
        # message naming the field) is the review's business (tests/unit/admission).
        assert answer["kind"] == "AdmissionReview"
        assert isinstance(answer["response"]["allowed"], bool)
        if b'"uid"' in body and expected_text != "not an AdmissionReview":
            assert answer["response"]["uid"] in (UID, "")
    else:
        assert answer["status"] == status and answer["error"]


@pytest.fixture(scope="module")
def app() -> Flask:
    return create_app(default_settings(), AllowAll())


@pytest.fixture(scope="module")
def client(app: Flask) -> Any:
    return app.test_client()


@pytest.mark.parametrize(
    ("name", "ctype", "body", "status", "text"), HOSTILE, ids=[h[0] for h in HOSTILE]
)
def test_hostile_input_in_process(
    client: Any, name: str, ctype: str, body: bytes, status: int, text: str
) -> None:
    response = client.post("/mutate", data=body, content_type=ctype)
    _check(response.status_code, response.data, status, text)


def test_echoes_uid_and_answers_a_pod(client: Any) -> None:
    response = client.post("/mutate", data=_review(), content_type=JSON)
    answer = response.get_json()
    assert answer["apiVersion"] == "admission.k8s.io/v1"
    assert answer["response"]["uid"] == UID
    assert answer["response"]["patchType"] == "JSONPatch"
    assert response.headers["Content-Type"] == JSON


def test_dry_run_requests_are_injected_like_any_other(client: Any) -> None:
    response = client.post("/mutate", data=_review(dryRun=True), content_type=JSON)
    assert response.get_json()["response"]["patch"]


def test_health_readiness_metrics_and_unknown_paths(client: Any) -> None:
    assert client.get("/healthz").status_code == 200
    assert client.get("/readyz").status_code == 200
    client.post("/mutate", data=_review(), content_type=JSON)
    metrics = client.get("/metrics").data.decode()
    assert 'sidecar_debug_reviews_total{decision="injected"' in metrics
    assert "sidecar_debug_review_duration_seconds_bucket" in metrics
    assert client.get("/nope").status_code == 404
    assert client.get("/mutate").status_code == 405


def test_unknown_paths_and_methods_say_what_to_send(client: Any) -> None:
    missing = client.get("/nope")
    assert missing.status_code == 404
    assert "POST /mutate" in missing.get_json()["error"]
    wrong = client.put("/mutate", data=_review(), content_type=JSON)
    assert wrong.status_code == 405
    assert wrong.headers["Allow"] == "POST"
    assert "PUT not allowed on /mutate" in wrong.get_json()["error"]
    assert client.options("/mutate").headers["Allow"] == "POST"
    assert client.post("/healthz").headers["Allow"] == "GET, HEAD"
    head = client.head("/healthz")
    assert head.status_code == 200 and head.data == b""
    head_405 = client.head("/mutate")
    assert head_405.status_code == 405 and head_405.data == b""
    assert head_405.headers["Allow"] == "POST"


def test_a_declared_oversized_body_is_refused_before_it_is_read(client: Any) -> None:
    limit = default_settings().max_request_bytes
    assert limit == 3 * 1024 * 1024  # the apiserver's own limit
    reply = client.post("/mutate", data=b"{}", content_type=JSON,
                        environ_overrides={"CONTENT_LENGTH": str(limit + 1)})
    assert reply.status_code == 413
    assert f"body of {limit + 1} bytes exceeds the {limit}-byte limit" in reply.get_json()["error"]


def test_the_namespace_gate_is_a_404_with_a_reason_when_not_enabled(client: Any) -> None:
    reply = client.post("/validate-namespace", data=_review(), content_type=JSON)
    assert reply.status_code == 404
    assert "not enabled" in reply.get_json()["error"]


def test_not_ready_says_why() -> None:
    app = create_app(default_settings(), AllowAll(), readiness=lambda: "no certificate yet")
    reply = app.test_client().get("/readyz")
    assert reply.status_code == 503
    assert reply.get_json() == {"status": "not ready", "reason": "no certificate yet"}


def test_the_factory_alone_builds_the_served_webhook() -> None:
    """create_app(settings): the configured policy gate and its namespace-label gate."""
    app = create_app(settings_with(tls_cert_file="/nonexistent/tls.crt",
                                   tls_key_file="/nonexistent/tls.key"))
    client = app.test_client()
    ready = client.get("/readyz")
    assert ready.status_code == 503 and "/nonexistent/tls.crt" in ready.get_json()["reason"]
    reply = client.post("/validate-namespace", data=_review(), content_type=JSON)
    assert reply.status_code == 200
    assert reply.get_json()["kind"] == "AdmissionReview"


def test_a_bug_in_a_handler_is_a_400_not_a_500(monkeypatch: pytest.MonkeyPatch) -> None:
    app = create_app(default_settings(), AllowAll())

    def broken(body: Any) -> Any:
        raise KeyError("bug")

    monkeypatch.setattr(app.extensions[EXTENSION].mutator, "review", broken)
    reply = app.test_client().post("/mutate", data=_review(), content_type=JSON)
    assert reply.status_code == 400
    assert reply.get_json()["error"] == "request could not be processed: KeyError"


# --- once through the real server -------------------------------------------------------------


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with serve(tmp_path_factory.mktemp("served"), {"SIDECAR_DEBUG_WORKERS": "1"}) as server:
        yield server


def test_hostile_input_through_gunicorn_over_tls(served: Served) -> None:
    for name, ctype, body, status, text in HOSTILE:
        try:
            got_status, got_body = post(served, "/mutate", body, ctype)
            _check(got_status, got_body, status, text)
        except (AssertionError, OSError) as exc:
            raise AssertionError(f"{name}: {exc}") from None
    status, body = post(served, "/mutate", _review())
    assert status == 200 and json.loads(body)["response"]["patch"]


def _raw(served: Served, request: bytes) -> bytes:
    """Send `request` as is on a new TLS connection; everything the server answers until it
    closes the connection."""
    with socket.create_connection(("127.0.0.1", served.port), timeout=30) as raw, \
            served.context.wrap_socket(raw) as conn:  # fmt: skip
        conn.sendall(request)
        answer = b""
        while chunk := conn.recv(65536):
            answer += chunk
    return answer


def test_an_oversized_body_gets_its_413_and_the_connection_is_closed(served: Served) -> None:
    """The apiserver never sends more than 3 MiB: a 6 MiB body is refused with the reason,
    the client can send it all and read the answer, and the connection is not reused."""
    body = b"[" + b"1," * (3 * 1024 * 1024) + b"1]"
    answer = _raw(served, b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
    head, _, payload = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413"), head
    assert b"Connection: close" in head
    assert "exceeds the 3145728-byte limit" in json.loads(payload)["error"]


def test_a_chunked_review_is_answered(served: Served) -> None:
    body = _review()
    chunks = b"".join(f"{len(part):x}\r\n".encode() + part + b"\r\n"
                      for part in (body[:100], body[100:]))
    head = (b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n")
    answer = _raw(served, head + chunks + b"0\r\n\r\n")
    status, _, payload = answer.partition(b"\r\n\r\n")
    assert status.startswith(b"HTTP/1.1 200"), answer[:300]
    assert json.loads(payload)["response"]["uid"] == UID


def test_expect_100_continue_is_honoured(served: Served) -> None:
    body = _review()
    with socket.create_connection(("127.0.0.1", served.port), timeout=30) as raw, \
            served.context.wrap_socket(raw) as conn:  # fmt: skip
        conn.sendall(b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Expect: 100-continue\r\nConnection: close\r\n"
                     + f"Content-Length: {len(body)}\r\n\r\n".encode())
        assert conn.recv(100) == b"HTTP/1.1 100 Continue\r\n\r\n"
        conn.sendall(body)
        answer = b""
        while chunk := conn.recv(65536):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 200"), answer[:300]
    assert b"100 Continue" not in answer


def test_refused_requests_keep_the_connection_usable(served: Served) -> None:
    """The apiserver reuses its connections: a refusal the app answers without reading the body
    (404, 405, 415, 400) must leave the connection ready for the next review on it."""
    import http.client

    conn = http.client.HTTPSConnection("127.0.0.1", served.port, context=served.context,
                                       timeout=30)
    try:
        for method, path, ctype, status in (("POST", "/nope", JSON, 404),
                                            ("PUT", "/mutate", JSON, 405),
                                            ("POST", "/mutate", "text/plain", 415),
                                            ("POST", "/mutate", JSON, 200)):
            conn.request(method, path, body=_review(), headers={"Content-Type": ctype})
            reply = conn.getresponse()
            body = reply.read()
            assert reply.status == status, body[:300]
            assert reply.getheader("Connection") != "close"
        assert json.loads(body)["response"]["uid"] == UID
    finally:
        conn.close()


def test_an_oversized_chunked_body_gets_its_413_and_the_connection_is_closed(
    served: Served,
) -> None:
    """Without a Content-Length the size shows only while reading: still a 413 with the reason,
    and the connection is not reused (the rest of the body is discarded)."""
    chunk = b"1," * 65536
    count = 3 * 1024 * 1024 // len(chunk) + 2
    body = b"".join(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n" for _ in range(count))
    answer = _raw(served, b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Transfer-Encoding: chunked\r\n\r\n" + body + b"0\r\n\r\n")
    head, _, payload = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413"), head
    assert b"Connection: close" in head
    assert "exceeds the 3145728-byte limit" in json.loads(payload)["error"]
