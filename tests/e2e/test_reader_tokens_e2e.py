"""Issue 24 item 5 against the real Kubernetes 1.20 apiserver (lite cluster): the token
`results open` sends for a service account is a TokenRequest bound to the results service's
readers' audience; the service's TokenReview (with that audience) accepts it as that service
account, the agents' routes and the apiserver itself refuse it. Without the right to request
one, `results open` says what it sends instead, or refuses with --require-bound-token."""

from __future__ import annotations

import argparse
import base64
import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster.cluster import Cluster
from tests.e2e.conftest import wait_until
from webhook.kube.client import api_client
from webhook.results.auth import Authenticator, AuthError, ReviewAPI, token_audiences
from webhook.results.opener import OpenError, choose_token

pytestmark = pytest.mark.cluster

AUDIENCE = "sidecar-debug.io/results/sidecar-debug/sidecar-debug-results"


@pytest.fixture
def namespace(lite_cluster: Cluster) -> Iterator[str]:
    name = f"readers-{uuid.uuid4().hex[:6]}"
    lite_cluster.kubectl("create", "namespace", name)
    yield name
    lite_cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


def account_token(cluster: Cluster, namespace: str, account: str) -> str:
    """The service account's legacy Secret token (1.20 makes one per account): what a
    kubeconfig for a CI bot or a shared reader account holds."""
    cluster.kubectl("create", "serviceaccount", account, "-n", namespace)
    secret = wait_until(lambda: cluster.kubectl_json(
        "get", "serviceaccount", account, "-n", namespace).get("secrets", [{}])[0].get("name"),
        60, f"the token Secret of {namespace}/{account}")
    data = cluster.kubectl_json("get", "secret", str(secret), "-n", namespace)["data"]
    return base64.b64decode(data["token"]).decode()


def kubeconfig(cluster: Cluster, token: str, path: Path) -> Path:
    import yaml

    config = yaml.safe_load(cluster.kubeconfig.read_text())
    config["users"] = [{"name": "reader", "user": {"token": token}}]
    for context in config["contexts"]:
        context["context"]["user"] = "reader"
    path.write_text(yaml.safe_dump(config))
    return path


def options(**values: object) -> argparse.Namespace:
    return argparse.Namespace(**{"token": None, "service_account": None,
                                 "require_bound_token": False, **values})


def test_results_open_sends_a_token_only_the_results_service_accepts(
        lite_cluster: Cluster, namespace: str, tmp_path: Path) -> None:
    from kubernetes import client

    cluster = lite_cluster
    own = account_token(cluster, namespace, "reader")
    cluster.kubectl("create", "role", "own-token", "-n", namespace, "--verb=create",
                    "--resource=serviceaccounts/token", "--resource-name=reader")
    cluster.kubectl("create", "rolebinding", "own-token", "-n", namespace, "--role=own-token",
                    f"--serviceaccount={namespace}:reader")
    core = client.CoreV1Api(api_client(str(kubeconfig(cluster, own, tmp_path / "reader")), None,
                                       kubeconfig_first=True))
    said: list[str] = []
    token, what = wait_until(lambda: choose_token(options(require_bound_token=True), own, core,
                                                  AUDIENCE, said.append),
                             30, "the Role to allow the TokenRequest")
    sent = token()
    assert sent != own and said == [] and f"{namespace}/reader" in what
    assert token_audiences(sent) == (AUDIENCE + "/readers",)

    # The service (TokenReview with the readers' audience) knows who it is...
    auth = Authenticator(ReviewAPI(str(cluster.kubeconfig), None), AUDIENCE)
    assert auth.reader(f"Bearer {sent}").name == f"system:serviceaccount:{namespace}:reader"
    # ...the agents' routes do not take it...
    with pytest.raises(AuthError) as refused:
        auth.agent(f"Bearer {sent}", "web")
    assert refused.value.status == 401
    # ...nor does the apiserver: it is not a credential for anything else.
    answer = cluster.kubectl("get", "pods", "-n", namespace, f"--token={sent}",
                             "--kubeconfig", str(tmp_path / "reader"), check=False)
    assert answer.returncode != 0 and "Unauthorized" in answer.stderr, answer.stderr
    # The kubeconfig's own token is still read as kubectl's (the documented fallback).
    assert auth.reader(f"Bearer {own}").name == f"system:serviceaccount:{namespace}:reader"


def test_without_the_right_it_says_what_it_sends_or_refuses(
        lite_cluster: Cluster, namespace: str, tmp_path: Path) -> None:
    from kubernetes import client

    own = account_token(lite_cluster, namespace, "plain")
    core = client.CoreV1Api(api_client(str(kubeconfig(lite_cluster, own, tmp_path / "plain")),
                                       None, kubeconfig_first=True))
    said: list[str] = []
    token, what = choose_token(options(), own, core, AUDIENCE, said.append)
    assert token() == own and "kubeconfig's own bearer token" in what
    [warning] = said
    assert "HTTP 403" in warning and "whoever controlled the results pod" in warning
    assert own not in warning
    with pytest.raises(OpenError) as refused:
        choose_token(options(require_bound_token=True), own, core, AUDIENCE, said.append)
    assert refused.value.code == 2
    assert json.dumps(own) not in str(refused.value)
