"""KubernetesClusterAPI against a local HTTP server: request shape, auth, timeouts, errors."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from webhook.kube.access import ClusterAPIError, KubernetesClusterAPI, service_account_check


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False


class FakeApiserver:
    def __init__(self) -> None:
        self.requests: list[tuple[str, str, dict[str, str], Any]] = []
        self.delay = 0.0
        self.status = 200
        self.allowed = True
        self.raw: bytes | None = None  # answer these bytes instead of JSON
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self, body: Any) -> None:
                time.sleep(fake.delay)
                if fake.delay:
                    return  # the client has given up; answering would only log a broken pipe
                data = json.dumps(body).encode() if fake.raw is None else fake.raw
                self.send_response(fake.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(length))
                fake.requests.append(
                    ("POST", self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                )
                self._answer({**body, "status": {"allowed": fake.allowed}})

            def do_GET(self) -> None:  # noqa: N802
                fake.requests.append(("GET", self.path, dict(self.headers), None))
                self._answer({"metadata": {"name": "dev", "labels": {"team": "a"}}})

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                return

        self.server = _Server(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"


@pytest.fixture
def apiserver() -> Iterator[FakeApiserver]:
    fake = FakeApiserver()
    yield fake
    fake.server.shutdown()
    fake.server.server_close()


def kubeconfig(tmp_path: Path, url: str) -> str:
    path = tmp_path / "kubeconfig"
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "t",
                "clusters": [{"name": "t", "cluster": {"server": url}}],
                "users": [{"name": "t", "user": {"token": "s3cret"}}],
                "contexts": [{"name": "t", "context": {"cluster": "t", "user": "t"}}],
            }
        )
    )
    return str(path)


def test_subject_access_review_request(apiserver: FakeApiserver, tmp_path: Path) -> None:
    api = KubernetesClusterAPI(kubeconfig(tmp_path, apiserver.url))
    check = service_account_check("dev", "app", "full")
    assert api.access_allowed(check, timeout=2) is True
    method, path, headers, body = apiserver.requests[0]
    assert (method, path) == ("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews")
    assert headers["authorization"] == "Bearer s3cret"
    assert body["kind"] == "SubjectAccessReview"
    assert body["spec"]["user"] == "system:serviceaccount:dev:app"
    assert body["spec"]["resourceAttributes"] == {
        "namespace": "dev",
        "verb": "use",
        "group": "sidecar-debug.io",
        "resource": "debugprofiles",
        "name": "full",
    }
    apiserver.allowed = False
    assert api.access_allowed(check, timeout=2) is False


def test_namespace_labels(apiserver: FakeApiserver, tmp_path: Path) -> None:
    api = KubernetesClusterAPI(kubeconfig(tmp_path, apiserver.url))
    assert api.namespace_labels("dev", timeout=2) == {"team": "a"}
    assert apiserver.requests[0][:2] == ("GET", "/api/v1/namespaces/dev")


def test_timeout_is_an_error_not_a_grant(apiserver: FakeApiserver, tmp_path: Path) -> None:
    api = KubernetesClusterAPI(kubeconfig(tmp_path, apiserver.url))
    apiserver.delay = 1.5
    started = time.monotonic()
    with pytest.raises(ClusterAPIError):
        api.access_allowed(service_account_check("dev", "app", "full"), timeout=0.3)
    assert time.monotonic() - started < 1.4


def test_http_error_is_an_error(apiserver: FakeApiserver, tmp_path: Path) -> None:
    api = KubernetesClusterAPI(kubeconfig(tmp_path, apiserver.url))
    apiserver.status = 403
    with pytest.raises(ClusterAPIError, match="HTTP 403"):
        api.access_allowed(service_account_check("dev", "app", "full"), timeout=2)


def test_no_configuration_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ClusterAPIError, match="no usable Kubernetes configuration"):
        KubernetesClusterAPI(str(tmp_path / "missing")).namespace_labels("dev", timeout=1)


def test_a_read_timeout_is_one_attempt(apiserver: FakeApiserver, tmp_path: Path) -> None:
    """A GET is not retried: the gate's deadline (sarTimeoutSeconds) is the whole wait."""
    api = KubernetesClusterAPI(kubeconfig(tmp_path, apiserver.url))
    apiserver.delay = 1.0
    started = time.monotonic()
    with pytest.raises(ClusterAPIError, match="GET /api/v1/namespaces/dev"):
        api.namespace_labels("dev", timeout=0.3)
    assert time.monotonic() - started < 0.9
    assert len(apiserver.requests) == 1


def test_an_answer_that_is_not_json_is_an_error(apiserver: FakeApiserver, tmp_path: Path) -> None:
    api = KubernetesClusterAPI(kubeconfig(tmp_path, apiserver.url))
    apiserver.raw = b"<html>proxy error</html>"
    with pytest.raises(ClusterAPIError, match="not JSON"):
        api.namespace_labels("dev", timeout=2)
    apiserver.raw = b"[1, 2]"
    with pytest.raises(ClusterAPIError, match="not a JSON object"):
        api.namespace_labels("dev", timeout=2)


def test_an_unreachable_apiserver_is_an_error(apiserver: FakeApiserver, tmp_path: Path) -> None:
    url = apiserver.url
    apiserver.server.shutdown()
    apiserver.server.server_close()
    api = KubernetesClusterAPI(kubeconfig(tmp_path, url))
    with pytest.raises(ClusterAPIError, match="GET /api/v1/namespaces/dev: "):
        api.namespace_labels("dev", timeout=2)


def test_every_api_call_goes_through_the_kube_client() -> None:
    """One way of calling the Kubernetes API: nothing outside webhook/kube/client.py builds an
    ApiClient or a Configuration, loads a kubeconfig, or talks HTTP to the apiserver itself."""
    import re

    root = Path(__file__).resolve().parents[3] / "webhook"
    pattern = re.compile(
        r"\bApiClient\(|\bConfiguration\(|load_kube_config|load_incluster_config"
        r"|\bimport (urllib3|requests|http\.client)\b|\bfrom (urllib3|requests|http\.client)\b"
        r"|urllib\.request|PoolManager\("
    )
    # `results open` speaks HTTP to the results service, through a port-forward socket that
    # the kube client opened: not to the apiserver. Exports go to Pyroscope and Parca, at the
    # export settings' URLs.
    elsewhere = {root / "kube" / "client.py", root / "results" / "opener.py",
                 root / "results" / "export" / "send.py"}
    offenders = [
        f"{path.relative_to(root.parent)}:{number}: {line.strip()}"
        for path in sorted(root.rglob("*.py"))
        if path not in elsewhere
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if pattern.search(line) and not line.lstrip().startswith("#")
    ]
    assert offenders == []
