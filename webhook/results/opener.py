"""`sidecar-debug results open`: the cluster's results page in your browser, as you.

A small HTTP server on 127.0.0.1 relays each request to the results service's pod through a
port-forward made with your kubeconfig (your own `pods/portforward` right in the release's
namespace; the kubelet connects to the service's loopback port from inside the pod's network
namespace, so no NetworkPolicy is involved) and adds your bearer token; the service checks the
token (TokenReview) and shows the namespaces RBAC lets you read. The token never reaches the
browser. Only requests whose Host is this server's own address are relayed (a web page that
points a name at 127.0.0.1 cannot use your token), and only GET and HEAD.

Client certificates: a kubeconfig that authenticates with a certificate has no token to
forward and the service cannot check a certificate (it is not the apiserver): use --token with
a token the apiserver accepts for you (an OIDC token, or a ServiceAccount token bound to the
rights you want to read with).
"""

from __future__ import annotations

import argparse
import http.client
import http.server
import sys
from typing import Any

HOP_BY_HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te",
              "trailers", "transfer-encoding", "upgrade", "authorization", "host",
              "content-length"}
TIMEOUT = 60.0


class OpenError(Exception):
    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


def kubeconfig_token(configuration: Any) -> str | None:
    """The bearer token the kubeconfig authenticates with (static token, token file or an
    exec/auth-provider plugin, as the client loaded it), None with client certificates."""
    api_key = getattr(configuration, "api_key", None) or {}
    value = api_key.get("authorization") or api_key.get("BearerToken")
    if isinstance(value, str) and value.strip():
        scheme, _, token = value.strip().partition(" ")
        return token.strip() if scheme.lower() == "bearer" and token.strip() else value.strip()
    return None


def results_pod(core: Any, namespace: str, release: str) -> str:
    selector = (f"app.kubernetes.io/instance={release},"
                "app.kubernetes.io/component=results")
    try:
        pods = core.list_namespaced_pod(namespace, label_selector=selector)
    except Exception as error:  # noqa: BLE001 - the API's answer, on one line
        status = getattr(error, "status", None)
        raise OpenError(f"cannot list the results service's pods in namespace {namespace}"
                        + (f" (HTTP {status})" if status else f": {error}")) from error
    running = [p.metadata.name for p in pods.items
               if p.status and p.status.phase == "Running" and not p.metadata.deletion_timestamp]
    if not running:
        raise OpenError(f"no running results service in namespace {namespace} (release "
                        f"{release}): install the chart with results.enabled=true")
    return str(sorted(running)[0])


def make_handler(forward: Any, token: str, allowed_hosts: set[str]) -> type:
    class Relay(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _relay(self, method: str) -> None:
            if self.headers.get("Host", "") not in allowed_hosts:
                self.send_error(421, "this server answers only for " + ", ".join(
                    sorted(allowed_hosts)))
                return
            sock = None
            try:
                sock = forward()
                connection = http.client.HTTPConnection("127.0.0.1", timeout=TIMEOUT)
                connection.sock = sock
                headers = {k: v for k, v in self.headers.items()
                           if k.lower() not in HOP_BY_HOP}
                headers["Authorization"] = f"Bearer {token}"
                headers["Host"] = "127.0.0.1"
                connection.request(method, self.path, headers=headers)
                answer = connection.getresponse()
                body = answer.read()
            except Exception as error:  # noqa: BLE001 - the port-forward broke: say so
                self.send_error(502, f"the port-forward to the results service failed: {error}")
                return
            finally:
                if sock is not None:
                    sock.close()
            self.send_response(answer.status)
            for key, value in answer.getheaders():
                if key.lower() not in HOP_BY_HOP:
                    self.send_header(key, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if method != "HEAD":
                self.wfile.write(body)

        def do_GET(self) -> None:  # noqa: N802 - http.server's API
            self._relay("GET")

        def do_HEAD(self) -> None:  # noqa: N802
            self._relay("HEAD")

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            return

    return Relay


def open_page(args: argparse.Namespace) -> int:
    from kubernetes import client
    from kubernetes.stream import portforward

    from webhook.kube.client import api_client

    api = api_client(args.kubeconfig, args.context, kubeconfig_first=True)
    token = args.token or kubeconfig_token(api.configuration)
    if not token:
        raise OpenError("your kubeconfig authenticates with a client certificate, which the "
                        "results service cannot check (it verifies bearer tokens with a "
                        "TokenReview): pass --token with a token the apiserver accepts for you",
                        2)
    core = client.CoreV1Api(api)
    pod = results_pod(core, args.namespace, args.release)

    def forward() -> Any:
        stream = portforward(core.connect_get_namespaced_pod_portforward, pod, args.namespace,
                             ports=str(args.remote_port))
        sock = stream.socket(args.remote_port)
        sock.setblocking(True)
        return sock

    server = http.server.ThreadingHTTPServer(("127.0.0.1", args.port), make_handler(
        forward, token, set()))
    port = server.server_address[1]
    server.RequestHandlerClass = make_handler(forward, token,
                                              {f"127.0.0.1:{port}", f"localhost:{port}"})
    print(f"results page of {args.namespace}/{pod}: http://127.0.0.1:{port}/ (as your "
          f"kubeconfig's user; Ctrl-C to stop)", file=sys.stderr, flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0

