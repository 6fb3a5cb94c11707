"""Hostile input never gets a 5xx or a traceback: the table runs through the WSGI app in
process (werkzeug's test client) and once through the real server (`sidecar-debug serve`:
gunicorn over TLS)."""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from werkzeug.test import Client

from tests.cluster.cluster import free_port
from tests.unit.core_helpers import admission_review, default_settings
from webhook.policy.api import AllowAll
from webhook.server.routes import create_app

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
    ("over the size limit", JSON, b"[" + b"1," * (3 * 1024 * 1024 + 10) + b"1]", 413, "limit"),
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
    ("object is a list", JSON, _review(object=[1, 2]), 200, "no Pod object"),
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
        assert answer["kind"] == "AdmissionReview"
        assert answer["response"]["allowed"] is True
        if b'"uid"' in body and expected_text != "not an AdmissionReview":
            assert answer["response"]["uid"] in (UID, "")
    else:
        assert answer["status"] == status and answer["error"]


@pytest.fixture(scope="module")
def client() -> Any:
    return Client(create_app(default_settings(), AllowAll()))


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
    assert client.post("/healthz").headers["Allow"] == "GET, HEAD"
    head = client.head("/healthz")
    assert head.status_code == 200 and head.data == b""


def test_a_bug_in_a_handler_is_a_400_not_a_500(monkeypatch: pytest.MonkeyPatch) -> None:
    app = create_app(default_settings(), AllowAll())

    def broken(body: Any) -> Any:
        raise KeyError("bug")

    monkeypatch.setattr(app.mutator, "review", broken)
    reply = Client(app).post("/mutate", data=_review(), content_type=JSON)
    assert reply.status_code == 400
    assert reply.get_json()["error"] == "request could not be processed: KeyError"


# --- once through the real server -------------------------------------------------------------



@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, ssl.SSLContext]]:
    certs = tmp_path_factory.mktemp("certs")
    cli = [sys.executable, "-m", "webhook.commands.cli"]
    subprocess.run(
        [
            *cli,
            "certs",
            "generate",
            "--service",
            "localhost",
            "--namespace",
            "test",
            "--out",
            str(certs),
        ],
        check=True,
        capture_output=True,
    )
    port = free_port()
    log = (certs / "serve.log").open("w")
    env = {**os.environ, "SIDECAR_DEBUG_WORKERS": "1"}
    server = subprocess.Popen(
        [
            *cli,
            "serve",
            "--tls-cert-file",
            str(certs / "tls.crt"),
            "--tls-key-file",
            str(certs / "tls.key"),
            "--port",
            str(port),
            "--bind-address",
            "127.0.0.1",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
    )
    context = ssl.create_default_context(cafile=str(certs / "ca.crt"))
    context.check_hostname = False  # the certificate names the Service, we dial 127.0.0.1
    url = f"https://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(url + "/healthz", context=context, timeout=2)  # noqa: S310
                break
            except (urllib.error.URLError, ConnectionError, OSError):
                if server.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(Path(log.name).read_text()) from None
                time.sleep(0.3)
        yield url, context
    finally:
        server.terminate()
        server.wait(timeout=30)


def _post(url: str, context: ssl.SSLContext, ctype: str, body: bytes) -> tuple[int, bytes]:
    request = urllib.request.Request(  # noqa: S310 - https to our own test server
        url + "/mutate",
        data=body,
        method="POST",  # noqa: S310
        headers={"Content-Type": ctype},
    )
    try:
        with urllib.request.urlopen(request, context=context, timeout=30) as response:  # noqa: S310
            return int(response.status), response.read()
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read()


def test_hostile_input_through_gunicorn_over_tls(served: tuple[str, ssl.SSLContext]) -> None:
    url, context = served
    for name, ctype, body, status, text in HOSTILE:
        try:
            got_status, got_body = _post(url, context, ctype, body)
            _check(got_status, got_body, status, text)
        except (AssertionError, OSError) as exc:
            raise AssertionError(f"{name}: {exc}") from None
    status, body = _post(url, context, JSON, _review())
    assert status == 200 and json.loads(body)["response"]["patch"]
