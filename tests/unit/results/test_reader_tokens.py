"""Issue 24 item 5: readers' tokens stay with the apiserver.

`results open` sends the results service a TokenRequest bound to the service's readers'
audience where the kubeconfig's identity is a service account (or --service-account names
one), and says so, with the risk, when it can only send the kubeconfig's own token; the service
reviews a bound token with that audience, refuses it on the agents' routes, and never logs or
stores a reader's token. The real apiserver's view: tests/e2e/test_reader_tokens_e2e.py.
"""

from __future__ import annotations

import argparse
import base64
import datetime as dt
import http.server
import json
import logging
import socket
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from webhook.kube.access import AccessCheck
from webhook.results.auth import (
    READER_AUDIENCE_SUFFIX,
    Authenticator,
    AuthError,
    jwt_claims,
    reader_audience,
    token_audiences,
)
from webhook.results.opener import (
    BOUND_TOKEN_SECONDS,
    BoundToken,
    OpenError,
    choose_token,
    command_audience,
    make_handler,
    service_account_of,
)
from webhook.results.store import Store
from webhook.results.web import create_app

AUDIENCE = "sidecar-debug.io/results/sidecar-debug/sidecar-debug-results"
READERS = AUDIENCE + READER_AUDIENCE_SUFFIX
APISERVER = "https://kubernetes.default.svc"


def jwt(claims: dict[str, Any]) -> str:
    """A token shaped as the apiserver issues them (the signature is the apiserver's business:
    the service only ever asks it, TokenReview)."""
    def part(value: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")

    return f"{part({'alg': 'RS256', 'kid': 'k'})}.{part(claims)}.c2lnbmF0dXJl"


def bound(namespace: str, account: str, audience: str) -> str:
    """A TokenRequest's token (Kubernetes 1.20 claims)."""
    return jwt({"aud": [audience], "exp": 2000000000, "iat": 1700000000,
                "iss": APISERVER, "kubernetes.io": {
                    "namespace": namespace, "serviceaccount": {"name": account, "uid": "u"}},
                "sub": f"system:serviceaccount:{namespace}:{account}"})


def legacy(namespace: str, account: str) -> str:
    """A service account token Secret's token (no audience: the apiserver's)."""
    return jwt({"iss": "kubernetes/serviceaccount",
                "kubernetes.io/serviceaccount/namespace": namespace,
                "kubernetes.io/serviceaccount/service-account.name": account,
                "kubernetes.io/serviceaccount/secret.name": f"{account}-token-x",
                "sub": f"system:serviceaccount:{namespace}:{account}"})


BOUND = bound("team", "reader", READERS)
LEGACY = legacy("team", "reader")
OIDC = jwt({"aud": ["kubernetes"], "iss": "https://dex.example", "sub": "alice"})
STATIC = "static-token-of-alice"


class Apiserver:
    """TokenReview as the apiserver answers it: a token is good for its own audiences only
    (no `aud` claim: the apiserver's), and `audiences` empty means the apiserver's."""

    def __init__(self) -> None:
        self.users = {BOUND: "system:serviceaccount:team:reader",
                      LEGACY: "system:serviceaccount:team:reader", OIDC: "alice",
                      STATIC: "alice"}
        self.reviews: list[tuple[str, tuple[str, ...]]] = []

    def token_review(self, token: str, audiences: tuple[str, ...], timeout: float
                     ) -> dict[str, Any]:
        self.reviews.append((token, audiences))
        mine = token_audiences(token) or (APISERVER,)
        if token == OIDC:
            mine = (APISERVER,)
        asked = audiences or (APISERVER,)
        common = [a for a in asked if a in mine]
        if token not in self.users or not common:
            return {"authenticated": False, "error": "invalid bearer token"}
        return {"authenticated": True, "audiences": common,
                "user": {"username": self.users[token], "uid": "1", "groups": []}}

    def access_allowed(self, check: AccessCheck, timeout: float) -> bool:
        return check.namespace == "team"


# ------------------------------------------------------------------ the service


def test_a_bound_token_is_reviewed_with_the_readers_audience() -> None:
    apiserver = Apiserver()
    auth = Authenticator(apiserver, AUDIENCE)
    assert auth.reader_audience == reader_audience(AUDIENCE) == READERS
    assert auth.reader(f"Bearer {BOUND}").name == "system:serviceaccount:team:reader"
    assert apiserver.reviews == [(BOUND, (READERS,))]
    # The kubeconfig's own tokens are still read as kubectl's would be (the documented path).
    for token in (LEGACY, OIDC, STATIC):
        assert auth.reader(f"Bearer {token}").name
        assert apiserver.reviews[-1] == (token, ())


def test_a_readers_bound_token_cannot_push_nor_pass_for_another_audience() -> None:
    auth = Authenticator(Apiserver(), AUDIENCE)
    with pytest.raises(AuthError) as refused:
        auth.agent(f"Bearer {BOUND}", "web-1")
    assert refused.value.status == 401
    # A token bound to another audience claiming nothing of ours: reviewed as the apiserver's,
    # which refuses it.
    other = bound("team", "reader", "vault")
    apiserver = Apiserver()
    apiserver.users[other] = "system:serviceaccount:team:reader"
    with pytest.raises(AuthError):
        Authenticator(apiserver, AUDIENCE).reader(f"Bearer {other}")
    assert apiserver.reviews == [(other, ())]
    # A forged claim of our audience gets nowhere: the review decides, with that audience.
    forged = bound("kube-system", "admin", READERS)
    with pytest.raises(AuthError) as refused:
        auth.reader(f"Bearer {forged}")
    assert refused.value.status == 401


@pytest.mark.parametrize("token", ["", "a.b", "a.!!!.c", "a." + "x" * 70000 + ".c",
                                   "a." + base64.urlsafe_b64encode(b"[1]").decode() + ".c",
                                   jwt({"aud": 7}), jwt({"kubernetes.io": "x"})])
def test_claims_of_anything_else_are_empty_never_an_error(token: str) -> None:
    assert token_audiences(token) == ()
    assert service_account_of(token) is None
    assert isinstance(jwt_claims(token), dict)


def test_the_service_never_logs_or_stores_a_readers_token(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    Store(tmp_path)
    app = create_app(tmp_path, Authenticator(Apiserver(), AUDIENCE))
    client = app.test_client()
    caplog.set_level(logging.DEBUG)
    secret = BOUND
    for url in ("/", "/api/runs", "/runs/team/web/20000101T000000Z-perf/", "/nope"):
        client.get(url, headers={"Authorization": f"Bearer {secret}"})
    refused = bound("team", "nobody", READERS)  # not accepted: a 401
    answer = client.get("/", headers={"Authorization": f"Bearer {refused}"})
    assert answer.status_code == 401
    body = answer.get_data(as_text=True)
    logged = caplog.text + "".join(str(r.__dict__) for r in caplog.records)
    for token in (secret, refused):
        assert token not in logged and token not in body
        assert token.split(".")[1] not in logged  # not even the claims
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert secret.encode() not in path.read_bytes()


# ------------------------------------------------------------------ results open


class TokenAPI:
    """CoreV1Api's TokenRequest: issues tokens bound to the audience asked, or refuses."""

    def __init__(self, status: int | None = None) -> None:
        self.status = status
        self.requests: list[tuple[str, str, list[str], int]] = []

    def create_namespaced_service_account_token(self, name: str, namespace: str, body: Any
                                                ) -> Any:
        self.requests.append((namespace, name, body.spec.audiences,
                              body.spec.expiration_seconds))
        if self.status is not None:
            from kubernetes.client.exceptions import ApiException

            raise ApiException(status=self.status, reason="Forbidden")
        token = bound(namespace, name, body.spec.audiences[0]) + f"-{len(self.requests)}"
        expiry = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=body.spec.expiration_seconds)
        return argparse.Namespace(status=argparse.Namespace(token=token,
                                                            expiration_timestamp=expiry))


def options(**values: Any) -> argparse.Namespace:
    return argparse.Namespace(**{"token": None, "service_account": None,
                                 "require_bound_token": False, **values})


def test_a_service_account_kubeconfig_sends_a_bound_token_of_its_own() -> None:
    api = TokenAPI()
    said: list[str] = []
    token, what = choose_token(options(), LEGACY, api, AUDIENCE, said.append)
    sent = token()
    assert api.requests == [("team", "reader", [READERS], BOUND_TOKEN_SECONDS)]
    assert token_audiences(sent) == (READERS,) and sent != LEGACY
    assert "team/reader bound to" in what and said == []
    # A bound kubeconfig token (projected, in-cluster) names its service account too.
    api = TokenAPI()
    choose_token(options(), bound("ci", "bot", APISERVER), api, AUDIENCE, said.append)[0]()
    assert api.requests[0][:3] == ("ci", "bot", [READERS])


@pytest.mark.parametrize("kubeconfig", [OIDC, STATIC, LEGACY])
def test_otherwise_the_kubeconfig_token_is_sent_with_a_warning_or_refused(kubeconfig: str
                                                                          ) -> None:
    api = TokenAPI(status=403)  # may not request its own token
    said: list[str] = []
    token, what = choose_token(options(), kubeconfig, api, AUDIENCE, said.append)
    assert token() == kubeconfig and "kubeconfig's own bearer token" in what
    [warning] = said
    for words in ("as it is", "whoever controlled the results pod could use it",
                  "--service-account NAMESPACE/NAME", "--require-bound-token"):
        assert words in warning
    assert kubeconfig not in warning
    with pytest.raises(OpenError) as refused:
        choose_token(options(require_bound_token=True), kubeconfig, api, AUDIENCE, said.append)
    assert refused.value.code == 2 and "no audience-bound token" in str(refused.value)
    if kubeconfig == LEGACY:
        assert "HTTP 403" in str(refused.value)
    else:
        assert "not a service account" in str(refused.value)


def test_service_account_option_and_its_refusals() -> None:
    api = TokenAPI()
    said: list[str] = []
    token, _ = choose_token(options(service_account="team/reader"), None, api, AUDIENCE,
                            said.append)
    assert token_audiences(token()) == (READERS,) and said == []
    for bad in ("reader", "team/", "/reader", "a/b/c"):
        with pytest.raises(OpenError) as refused:
            choose_token(options(service_account=bad), None, api, AUDIENCE, said.append)
        assert refused.value.code == 2
    with pytest.raises(OpenError) as refused:
        choose_token(options(service_account="team/reader"), STATIC, TokenAPI(403), AUDIENCE,
                     said.append)
    assert "create` on serviceaccounts/token for team/reader" in str(refused.value)
    # A certificate kubeconfig without either: says what to pass.
    with pytest.raises(OpenError) as refused:
        choose_token(options(), None, api, AUDIENCE, said.append)
    assert "--service-account" in str(refused.value) and refused.value.code == 2
    # --token is the user's choice, sent as it is, with no TokenRequest.
    token, what = choose_token(options(token="mine"), LEGACY, TokenAPI(), AUDIENCE, said.append)
    assert token() == "mine" and "--token" in what


def test_a_bound_token_is_renewed_before_it_expires() -> None:
    api, now = TokenAPI(), [0.0]
    source = BoundToken(api, "team", "reader", READERS, clock=lambda: now[0])
    first = source.get()
    now[0] = BOUND_TOKEN_SECONDS - 200.0
    assert source.get() == first and len(api.requests) == 1
    now[0] = BOUND_TOKEN_SECONDS - 100.0
    assert source.get() != first and len(api.requests) == 2


def test_the_audience_is_read_from_the_results_pods_command() -> None:
    def pod(*words: str) -> Any:
        container = argparse.Namespace(command=list(words), args=None)
        return argparse.Namespace(spec=argparse.Namespace(containers=[container]))

    assert command_audience(pod("sidecar-debug", "results", "service", "--audience",
                                AUDIENCE, "--port", "8443")) == AUDIENCE
    assert command_audience(pod("x", f"--audience={AUDIENCE}")) == AUDIENCE
    assert command_audience(pod("x", "--audience")) is None
    assert command_audience(argparse.Namespace(spec=None)) is None


@pytest.fixture
def results_service() -> Iterator[tuple[int, list[str]]]:
    """A stand-in for the results pod's loopback port: records the Authorization it gets."""
    seen: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            seen.append(self.headers.get("Authorization", ""))
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            return

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1], seen
    server.shutdown()


def test_the_relay_sends_the_bound_token_and_prints_or_logs_nothing_of_it(
        results_service: tuple[int, list[str]], capsys: pytest.CaptureFixture[str],
        caplog: pytest.LogCaptureFixture) -> None:
    port, seen = results_service
    caplog.set_level(logging.DEBUG)
    api = TokenAPI()
    token, _ = choose_token(options(), LEGACY, api, AUDIENCE, print)
    relay = http.server.ThreadingHTTPServer(("127.0.0.1", 0), make_handler(
        lambda: socket.create_connection(("127.0.0.1", port)), token, set()))
    local = relay.server_address[1]
    relay.RequestHandlerClass = make_handler(
        lambda: socket.create_connection(("127.0.0.1", port)), token, {f"127.0.0.1:{local}"})
    threading.Thread(target=relay.serve_forever, daemon=True).start()
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{local}/", timeout=10) as answer:  # noqa: S310
            assert answer.read() == b"ok"
        # Another Host (a page pointing a name at 127.0.0.1) gets nothing relayed.
        request = urllib.request.Request(f"http://127.0.0.1:{local}/",  # noqa: S310
                                         headers={"Host": "evil.example"})
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=10)  # noqa: S310
        assert refused.value.code == 421
    finally:
        relay.shutdown()
    [sent] = seen
    assert sent.startswith("Bearer ") and token_audiences(sent.removeprefix("Bearer ")) == (
        READERS,)
    out = capsys.readouterr()
    for secret in (sent.removeprefix("Bearer "), LEGACY):
        assert secret not in out.out + out.err + caplog.text
