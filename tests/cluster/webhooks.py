"""Helpers to put a webhook process on the host behind a Service of the lite cluster.

In lite mode Service ClusterIPs are loopback addresses and the apiserver dials a webhook
Service's ClusterIP:port directly (its default ClusterIP service resolver), so a process bound
to that address *is* the webhook, with no pod and no kube-proxy.
"""

from __future__ import annotations

import base64
import datetime
import json
import ssl
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from tests.cluster.cluster import Cluster
from webhook.certs import pki, tls


def serving_cert(directory: Path, service: str, namespace: str) -> tuple[bytes, Path, Path]:
    """A throw-away CA and a serving cert for the Service's DNS names, made by the webhook's own
    generator (webhook.certs.pki): (ca_pem, tls.crt, tls.key); ca.crt is written beside them."""
    directory.mkdir(parents=True, exist_ok=True)
    validity = datetime.timedelta(days=2)
    ca = pki.generate_ca("test-webhook-ca", validity=validity)
    serving = pki.generate_serving(
        ca, pki.service_dns_names(service, namespace)[2:], validity=validity
    )
    (directory / "ca.crt").write_bytes(ca.cert_pem)
    (directory / "tls.crt").write_bytes(serving.cert_pem)
    tls.write_private_file(directory / "tls.key", serving.key_pem)
    return ca.cert_pem, directory / "tls.crt", directory / "tls.key"


def create_service(cluster: Cluster, name: str, namespace: str, port: int = 443) -> str:
    """A selector-less Service; returns its (loopback, in lite mode) ClusterIP."""
    manifest = {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"ports": [{"name": "https", "port": port, "targetPort": port}]},
    }
    cluster.kubectl("apply", "-f", "-", input=json.dumps(manifest))
    service = cluster.kubectl_json("get", "service", name, "-n", namespace)
    return str(service["spec"]["clusterIP"])


# The chart's rules (tests/chart/test_chart_render.py keeps them equal): pods at CREATE, and
# ephemeral containers added to a running pod (`sidecar-debug attach`, `kubectl debug`).
POD_RULES: list[dict[str, Any]] = [
    {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
     "resources": ["pods"], "scope": "Namespaced"},
    {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"],
     "resources": ["pods/ephemeralcontainers"], "scope": "Namespaced"},
]


def mutating_webhook_configuration(
    name: str, *, service: str, namespace: str, ca_pem: bytes, path: str = "/mutate",
    port: int = 443, failure_policy: str = "Fail", timeout_seconds: int = 5,
    namespace_selector: dict[str, Any] | None = None,
    object_selector: dict[str, Any] | None = None,
    reinvocation_policy: str = "Never",
) -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [{
            "name": f"{name}.sidecar-debug.io",
            "admissionReviewVersions": ["v1"],
            "sideEffects": "None",
            "failurePolicy": failure_policy,
            "timeoutSeconds": timeout_seconds,
            "reinvocationPolicy": reinvocation_policy,
            "matchPolicy": "Equivalent",
            "clientConfig": {
                "service": {"name": service, "namespace": namespace, "path": path, "port": port},
                "caBundle": base64.b64encode(ca_pem).decode(),
            },
            "rules": [dict(rule) for rule in POD_RULES],
            "namespaceSelector": namespace_selector or {},
            "objectSelector": object_selector or {},
        }],
    }


# The guard's rules (the chart's ValidatingWebhookConfiguration, tests/chart/test_chart_render.py).
GUARD_RULES: list[dict[str, Any]] = [
    {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
     "resources": ["pods"], "scope": "Namespaced"},
    {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"],
     "resources": ["pods/ephemeralcontainers"], "scope": "Namespaced"},
]


def validating_webhook_configuration(
    name: str, *, service: str, namespace: str, ca_pem: bytes, path: str = "/validate-pods",
    namespace_selector: dict[str, Any] | None = None, timeout_seconds: int = 10,
) -> dict[str, Any]:
    """The guard's entry (failurePolicy Fail) for a webhook process on the host."""
    configuration = mutating_webhook_configuration(
        name, service=service, namespace=namespace, ca_pem=ca_pem, path=path,
        namespace_selector=namespace_selector, timeout_seconds=timeout_seconds)
    configuration["kind"] = "ValidatingWebhookConfiguration"
    hook = configuration["webhooks"][0]
    del hook["reinvocationPolicy"]
    hook["rules"] = [dict(rule) for rule in GUARD_RULES]
    return configuration


class CaptureWebhook:
    """An HTTPS admission webhook that allows everything and keeps each AdmissionReview."""

    def __init__(self, host: str, port: int, cert: Path, key: Path,
                 respond: Callable[[dict[str, Any]], dict[str, Any]] | None = None) -> None:
        self.reviews: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        capture = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                length = int(self.headers.get("Content-Length", "0"))
                review = json.loads(self.rfile.read(length))
                with capture._lock:
                    capture.reviews.append(review)
                response = (respond or _allow)(review)
                body = json.dumps(response).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                return

        self._server = ThreadingHTTPServer((host, port), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(str(cert), str(key))
        self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> CaptureWebhook:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def wait_for(self, predicate: Callable[[dict[str, Any]], bool],
                 timeout: float = 30) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                for review in self.reviews:
                    if predicate(review):
                        return review
            time.sleep(0.1)
        raise TimeoutError("no matching AdmissionReview arrived")


def _allow(review: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "response": {"uid": review["request"]["uid"], "allowed": True},
    }
