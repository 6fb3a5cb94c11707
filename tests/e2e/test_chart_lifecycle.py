"""Issue 3, point 1: helm install / test / upgrade / uninstall of the chart on the full cluster."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from collections.abc import Iterator

import pytest

from tests.cluster.cluster import Cluster
from tests.e2e.conftest import (
    CHART,
    helm_values,
    install_chart,
    is_injected,
    pod_manifest,
    pods_staying,
    wait_for_webhook_ready,
    wait_until,
)
from tests.e2e.test_certs_e2e import assert_log_is_clean

pytestmark = [pytest.mark.cluster, pytest.mark.full]

RELEASE = "lifecycle"
NAMESPACE = "sd-lifecycle"
CLUSTER_KINDS = ("mutatingwebhookconfigurations", "validatingwebhookconfigurations",
                 "clusterroles", "clusterrolebindings")


def _cluster_objects_of_release(cluster: Cluster) -> list[str]:
    found = []
    for kind in CLUSTER_KINDS:
        items = cluster.kubectl_json("get", kind, "-l", f"app.kubernetes.io/instance={RELEASE}")
        found += [f"{kind}/{item['metadata']['name']}" for item in items["items"]]
    return found


def _webhook_pods(cluster: Cluster) -> list[str]:
    return [pod["metadata"]["name"]
            for pod in pods_staying(cluster, NAMESPACE, "app.kubernetes.io/component=webhook")]


def _assert_webhook_logs_clean(cluster: Cluster) -> None:
    """Issue 12, item 10: the webhook pods' logs hold no traceback and no `Logging error`."""
    for pod in _webhook_pods(cluster):
        text = cluster.kubectl("logs", "-n", NAMESPACE, pod, "--all-containers").stdout
        assert text.strip(), f"no log from {pod}"
        assert_log_is_clean(text, f"the log of {pod}")


def _reviewed_pod_is_injected(cluster: Cluster, namespace: str, name: str) -> None:
    # A server-side dry run goes through the webhook and stores nothing.
    out = cluster.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-",
                          input=json.dumps(pod_manifest(name, namespace))).stdout
    assert is_injected(json.loads(out)), out[:2000]


def _rotate_serving_certificate(cluster: Cluster, secret: str) -> None:
    """`sidecar-debug certs rotate --force` against the release, then wait until the webhook
    serves the renewed certificate (a review over TLS succeeds with it)."""
    service = cluster.kubectl_json("get", "services", "-n", NAMESPACE,
                                   "-l", f"app.kubernetes.io/instance={RELEASE}")["items"][0]
    configuration = cluster.kubectl_json(
        "get", "mutatingwebhookconfigurations",
        "-l", f"app.kubernetes.io/instance={RELEASE}")["items"][0]
    before = cluster.kubectl_json("get", "secret", secret, "-n", NAMESPACE)["data"]["tls.crt"]
    done = subprocess.run(  # noqa: S603 - our own CLI
        [sys.executable, "-m", "webhook.commands.cli", "certs", "rotate", "--force",
         "--namespace", NAMESPACE, "--secret", secret,
         "--service", service["metadata"]["name"],
         "--webhook-configuration", configuration["metadata"]["name"]],
        env=cluster.env(), capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr + done.stdout
    after = cluster.kubectl_json("get", "secret", secret, "-n", NAMESPACE)["data"]["tls.crt"]
    assert after != before, "certs rotate --force did not renew the serving certificate"


@pytest.fixture
def lifecycle_release(full_cluster: Cluster, node_images: dict[str, str]) -> Iterator[None]:
    """Whatever the test left installed goes afterwards: a second installation left behind
    makes every later CLI call ambiguous and injects twice."""
    full_cluster.helm("uninstall", RELEASE, "-n", NAMESPACE, check=False)
    yield
    if full_cluster.helm("status", RELEASE, "-n", NAMESPACE, check=False).returncode == 0:
        full_cluster.helm("uninstall", RELEASE, "-n", NAMESPACE, "--wait", check=False,
                          timeout=300)
        full_cluster.kubectl("delete", "namespace", NAMESPACE, "--wait=false", check=False)


@pytest.mark.usefixtures("lifecycle_release")
def test_install_test_upgrade_uninstall(full_cluster: Cluster) -> None:
    install_chart(full_cluster, RELEASE, NAMESPACE)
    wait_for_webhook_ready(full_cluster, NAMESPACE)

    # Certificates: a kubernetes.io/tls Secret with the CA, and that CA in the configuration.
    secrets = full_cluster.kubectl_json("get", "secrets", "-n", NAMESPACE,
                                        "--field-selector", "type=kubernetes.io/tls")["items"]
    assert secrets, "no TLS Secret in the release namespace"
    data = secrets[0]["data"]
    assert {"tls.crt", "tls.key", "ca.crt"} <= set(data)
    configurations = full_cluster.kubectl_json(
        "get", "mutatingwebhookconfigurations", "-l", f"app.kubernetes.io/instance={RELEASE}")
    hooks = [hook for item in configurations["items"] for hook in item["webhooks"]]
    assert hooks
    for hook in hooks:
        ca_bundle = base64.b64decode(hook["clientConfig"]["caBundle"])
        assert ca_bundle.strip() == base64.b64decode(data["ca.crt"]).strip()

    pods = full_cluster.kubectl_json("get", "pods", "-n", NAMESPACE,
                                     "-l", "app.kubernetes.io/component=webhook")["items"]
    assert pods and all(
        all(status["ready"] for status in pod["status"].get("containerStatuses", []))
        for pod in pods)

    tested = full_cluster.helm("test", RELEASE, "-n", NAMESPACE, "--timeout", "3m", timeout=240)
    assert "Phase:" in tested.stdout and "Succeeded" in tested.stdout, tested.stdout

    # Reviews, a certificate rotation, reviews with the renewed certificate: the webhook's own
    # log stays free of tracebacks and logging errors.
    apps = f"{NAMESPACE}-apps"
    full_cluster.kubectl("create", "namespace", apps, check=False)
    full_cluster.kubectl("label", "namespace", apps, "debug=enabled", "--overwrite")
    try:
        _reviewed_pod_is_injected(full_cluster, apps, "before-rotation")
        _rotate_serving_certificate(full_cluster, secrets[0]["metadata"]["name"])

        # Every webhook pod loads the renewed certificate without a restart (within its
        # Secret resync), and reviews keep being answered.
        def reloaded() -> bool:
            return all("serving certificate reloaded" in full_cluster.kubectl(
                "logs", "-n", NAMESPACE, pod, "--all-containers").stdout
                for pod in _webhook_pods(full_cluster))

        wait_until(reloaded, 180, "every webhook pod to load the renewed certificate")
        for n in range(5):
            _reviewed_pod_is_injected(full_cluster, apps, f"after-rotation-{n}")
        _assert_webhook_logs_clean(full_cluster)
    finally:
        full_cluster.kubectl("delete", "namespace", apps, "--wait=false", check=False)

    full_cluster.helm("upgrade", RELEASE, str(CHART), "-n", NAMESPACE,
                      "--wait", "--timeout", "5m",
                      *helm_values("--set", "webhook.logLevel=DEBUG"), timeout=400)
    wait_for_webhook_ready(full_cluster, NAMESPACE)
    history = full_cluster.helm("history", RELEASE, "-n", NAMESPACE, "-o", "json").stdout
    assert [entry["revision"] for entry in json.loads(history)][-1] == 2
    _assert_webhook_logs_clean(full_cluster)  # the upgraded pods, at DEBUG level

    full_cluster.helm("uninstall", RELEASE, "-n", NAMESPACE, "--wait", timeout=300)
    wait_until(lambda: not _cluster_objects_of_release(full_cluster), 60,
               "cluster-scoped objects of the release to go")
    # In `self` mode the webhook creates its TLS Secret itself (create-if-absent, so replicas
    # agree); it is owned by the MutatingWebhookConfiguration, so the garbage collector removes
    # it once uninstall deleted that: nothing is left behind.
    def namespaced_leftovers() -> list[str]:
        names = full_cluster.kubectl(
            "get", "all,configmaps,secrets,serviceaccounts,roles,rolebindings,"
            "poddisruptionbudgets", "-n", NAMESPACE, "-o", "name").stdout.split()
        return [name for name in names
                if not name.startswith(("secret/default-token-", "serviceaccount/default",
                                         "configmap/kube-root-ca.crt"))]

    # Pods take their grace period to go; anything else must be gone at once.
    try:
        wait_until(lambda: namespaced_leftovers() == [], 90, "the release's objects to go")
    except AssertionError:
        raise AssertionError(f"left behind by helm uninstall: {namespaced_leftovers()}") from None
    full_cluster.kubectl("delete", "namespace", NAMESPACE, "--wait=false")

