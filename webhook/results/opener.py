"""`sidecar-debug results open`: the cluster's results page in your browser, as you.

A small HTTP server on 127.0.0.1 relays each request to the results service's pod through a
port-forward made with your kubeconfig (your own `pods/portforward` right in the release's
namespace; the kubelet connects to the service's loopback port from inside the pod's network
namespace, so no NetworkPolicy is involved) and adds a bearer token for you; the service checks
the token (TokenReview) and shows the namespaces RBAC lets you read. The token never reaches the
browser. Only requests whose Host is this server's own address are relayed (a web page that
points a name at 127.0.0.1 cannot use your token), and only GET and HEAD.

Which token (issue 24: the results pod parses hostile agent input; a token it holds must be
worth nothing elsewhere):
- `--service-account NS/NAME`, or a kubeconfig whose identity is a service account: a
  TokenRequest for that service account, bound to the service's readers' audience
  (`<audience>/readers`, the audience read from the results pod's command line) and valid for
  10 minutes, renewed while the page is open. The apiserver refuses it; the service's agent
  routes refuse it. It needs `create` on `serviceaccounts/token` for that service account.
- Otherwise (a person's OIDC or static token, or no right to request one): the kubeconfig's own
  bearer token, sent as it is, with a warning saying so; `--require-bound-token` refuses instead.
- `--token TOKEN`: that token, as it is (your choice).

Client certificates: a kubeconfig that authenticates with a certificate has no token to
forward and the service cannot check a certificate (it is not the apiserver): use
--service-account, or --token.
"""

from __future__ import annotations

import argparse
import datetime as dt
import http.client
import http.server
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from webhook.results.auth import jwt_claims, reader_audience

HOP_BY_HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te",
              "trailers", "transfer-encoding", "upgrade", "authorization", "host",
              "content-length"}
TIMEOUT = 60.0
BOUND_TOKEN_SECONDS = 600  # the shortest TokenRequest the apiserver grants
RENEW_BEFORE_SECONDS = 120


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


def service_account_of(token: str) -> tuple[str, str] | None:
    """(namespace, name) of the service account a token names (a bound token's `kubernetes.io`
    claim, or a legacy Secret token's), read without verifying: only to know whom to ask a
    TokenRequest for, which the apiserver authorizes; None for anything else."""
    claims = jwt_claims(token)
    bound = claims.get("kubernetes.io")
    if isinstance(bound, dict):
        account = bound.get("serviceaccount")
        namespace = bound.get("namespace")
        name = account.get("name") if isinstance(account, dict) else None
    else:
        namespace = claims.get("kubernetes.io/serviceaccount/namespace")
        name = claims.get("kubernetes.io/serviceaccount/service-account.name")
    if isinstance(namespace, str) and isinstance(name, str) and namespace and name:
        return namespace, name
    return None


def command_audience(pod: Any) -> str | None:
    """The `--audience` the results service's pod was started with (the chart's command)."""
    for container in (getattr(getattr(pod, "spec", None), "containers", None) or []):
        words = [*(container.command or []), *(container.args or [])]
        for index, word in enumerate(words):
            if word == "--audience" and index + 1 < len(words):
                return str(words[index + 1])
            if isinstance(word, str) and word.startswith("--audience="):
                return word.split("=", 1)[1]
    return None


def results_pod(core: Any, namespace: str, release: str) -> tuple[str, str | None]:
    """The running results service's pod: its name and its agents' audience."""
    selector = (f"app.kubernetes.io/instance={release},"
                "app.kubernetes.io/component=results")
    try:
        pods = core.list_namespaced_pod(namespace, label_selector=selector)
    except Exception as error:  # noqa: BLE001 - the API's answer, on one line
        status = getattr(error, "status", None)
        raise OpenError(f"cannot list the results service's pods in namespace {namespace}"
                        + (f" (HTTP {status})" if status else f": {error}")) from error
    running = sorted((p for p in pods.items
                      if p.status and p.status.phase == "Running"
                      and not p.metadata.deletion_timestamp),
                     key=lambda p: str(p.metadata.name))
    if not running:
        raise OpenError(f"no running results service in namespace {namespace} (release "
                        f"{release}): install the chart with results.enabled=true")
    return str(running[0].metadata.name), command_audience(running[0])


class BoundToken:
    """Tokens for one service account bound to `audience` (TokenRequest), renewed before they
    expire; `get()` is called per relayed request, from the server's threads."""

    def __init__(self, core: Any, namespace: str, account: str, audience: str,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.core, self.namespace, self.account, self.audience = core, namespace, account, audience
        self._clock = clock
        self._lock = threading.Lock()
        self._token = ""
        self._renew_at = 0.0

    def get(self) -> str:
        with self._lock:
            if not self._token or self._clock() >= self._renew_at:
                self._request()
            return self._token

    def _request(self) -> None:
        from kubernetes import client

        body = client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(
            audiences=[self.audience], expiration_seconds=BOUND_TOKEN_SECONDS))
        try:
            answer = self.core.create_namespaced_service_account_token(
                self.account, self.namespace, body)
        except Exception as error:  # noqa: BLE001 - the API's answer, on one line
            status = getattr(error, "status", None)
            reason = getattr(error, "reason", None) or error
            raise OpenError(
                f"cannot request a token for service account {self.namespace}/{self.account} "
                f"bound to {self.audience!r}" + (f" (HTTP {status} {reason})" if status else
                                                 f": {reason}")) from error
        token = getattr(getattr(answer, "status", None), "token", None)
        if not isinstance(token, str) or not token:
            raise OpenError("the apiserver's TokenRequest answer carries no token")
        expiry = getattr(answer.status, "expiration_timestamp", None)
        lifetime = float(BOUND_TOKEN_SECONDS)
        if isinstance(expiry, dt.datetime):
            now = dt.datetime.now(dt.UTC)
            lifetime = (expiry.astimezone(dt.UTC) - now).total_seconds()
        self._token = token
        self._renew_at = self._clock() + max(lifetime - RENEW_BEFORE_SECONDS, lifetime / 2, 1.0)


def choose_token(args: argparse.Namespace, kubeconfig_bearer: str | None, core: Any,
                 audience: str | None, say: Callable[[str], None]
                 ) -> tuple[Callable[[], str], str]:
    """The token source for the relay and what it sends, in words (see the module doc)."""
    if args.token:
        return (lambda: str(args.token)), "the token given with --token, as it is"
    readers = reader_audience(audience) if audience else None
    account: tuple[str, str] | None = None
    if args.service_account:
        namespace, _, name = str(args.service_account).partition("/")
        if not namespace or not name or "/" in name:
            raise OpenError(f"--service-account {args.service_account!r}: give NAMESPACE/NAME",
                            2)
        account = (namespace, name)
    elif kubeconfig_bearer:
        account = service_account_of(kubeconfig_bearer)
    problem = ""
    if account is not None and readers is None:
        problem = ("the results service's pod names no --audience, so no token can be bound "
                   "to it")
    elif account is not None and readers is not None:
        source = BoundToken(core, account[0], account[1], readers)
        try:
            source.get()
        except OpenError as error:
            if args.service_account:
                raise OpenError(f"{error}: that takes `create` on serviceaccounts/token for "
                                f"{account[0]}/{account[1]}") from error
            problem = str(error)
        else:
            return source.get, (f"tokens of service account {account[0]}/{account[1]} bound to "
                                f"{readers!r}, 10 minutes each")
    if not kubeconfig_bearer:
        raise OpenError("your kubeconfig authenticates with a client certificate, which the "
                        "results service cannot check (it verifies bearer tokens with a "
                        "TokenReview): pass --service-account NAMESPACE/NAME (a reader service "
                        "account you may request tokens for) or --token", 2)
    why = problem or "your kubeconfig's identity is not a service account (TokenRequest exists "\
        "only for those)"
    if args.require_bound_token:
        raise OpenError(f"no audience-bound token: {why}; without --require-bound-token your "
                        "kubeconfig's own token would be sent", 2)
    say("warning: sending the results service your kubeconfig's own bearer token, as it is: "
        f"no token bound to the service could be had ({why}). The apiserver accepts that token "
        "as you until it expires, so whoever controlled the results pod could use it. Safer: "
        "--service-account NAMESPACE/NAME (a service account holding only the results reader "
        "role, for which you may create serviceaccounts/token); --require-bound-token refuses "
        "instead of sending it.")
    bearer = kubeconfig_bearer
    return (lambda: bearer), "your kubeconfig's own bearer token, as it is"


def make_handler(forward: Any, token: Callable[[], str], allowed_hosts: set[str]) -> type:
    class Relay(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _relay(self, method: str) -> None:
            if self.headers.get("Host", "") not in allowed_hosts:
                self.send_error(421, "this server answers only for " + ", ".join(
                    sorted(allowed_hosts)))
                return
            try:
                bearer = token()
            except OpenError as error:
                self.send_error(502, f"no token for the results service: {error}")
                return
            sock = None
            try:
                sock = forward()
                connection = http.client.HTTPConnection("127.0.0.1", timeout=TIMEOUT)
                connection.sock = sock
                headers = {k: v for k, v in self.headers.items()
                           if k.lower() not in HOP_BY_HOP}
                headers["Authorization"] = f"Bearer {bearer}"
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
    core = client.CoreV1Api(api)
    pod, audience = results_pod(core, args.namespace, args.release)
    token, what = choose_token(args, kubeconfig_token(api.configuration), core, audience,
                               lambda line: print(line, file=sys.stderr, flush=True))

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
    print(f"results page of {args.namespace}/{pod}: http://127.0.0.1:{port}/ (sending {what}; "
          "Ctrl-C to stop)", file=sys.stderr, flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0

