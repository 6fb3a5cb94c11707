"""A stand-in Kubernetes API for the handler sections: answers the policy gate's two calls
(SubjectAccessReview: not allowed; GET namespace: labelled debug=enabled) over plain HTTP on
loopback, with a kubeconfig pointing at it.

The served webhook asks these only when its caches (sarCacheSeconds, 10 s) expire, so the
handler numbers do not depend on a cluster; sections 4 and 5 use the real apiserver."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from webhook.wire import constants


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    calls: dict[str, int] = {}

    def _answer(self, payload: dict[str, Any]) -> None:
        body = json.dumps(payload).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        length = int(self.headers.get("Content-Length") or 0)
        review = json.loads(self.rfile.read(length) or b"{}")
        _Handler.calls["subjectaccessreviews"] = _Handler.calls.get("subjectaccessreviews", 0) + 1
        self._answer({**review, "status": {"allowed": False}})

    def do_GET(self) -> None:  # noqa: N802
        name = self.path.rstrip("/").rsplit("/", 1)[-1]
        _Handler.calls["namespaces"] = _Handler.calls.get("namespaces", 0) + 1
        self._answer({"apiVersion": "v1", "kind": "Namespace",
                      "metadata": {"name": name, "labels": {
                          constants.LABEL_DEBUG: constants.LABEL_VALUE_ENABLED}}})

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        return


@contextmanager
def stub_api(directory: Path) -> Iterator[Path]:
    """Serve until the block ends; yields the kubeconfig path."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    port = server.server_address[1]
    kubeconfig = directory / "stub.kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "stub",
        "clusters": [{"name": "stub", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
        "users": [{"name": "stub", "user": {"token": "bench"}}],
        "contexts": [{"name": "stub", "context": {"cluster": "stub", "user": "stub"}}],
    }))
    try:
        yield kubeconfig
    finally:
        server.shutdown()
        server.server_close()


def calls() -> dict[str, int]:
    return dict(_Handler.calls)
