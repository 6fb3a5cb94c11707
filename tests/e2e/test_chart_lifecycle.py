"""Issue 3, point 1: helm install / test / upgrade / uninstall of the chart on the full cluster."""

from __future__ import annotations

import base64
import json

import pytest

from tests.cluster.cluster import Cluster
from tests.e2e.conftest import (
    CHART,
    helm_values,
    install_chart,
    wait_for_webhook_ready,
    wait_until,
)

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


def test_install_test_upgrade_uninstall(full_cluster: Cluster,
                                        node_images: dict[str, str]) -> None:
    full_cluster.helm("uninstall", RELEASE, "-n", NAMESPACE, check=False)
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

    full_cluster.helm("upgrade", RELEASE, str(CHART), "-n", NAMESPACE,
                      "--wait", "--timeout", "5m",
                      *helm_values("--set", "webhook.logLevel=DEBUG"), timeout=400)
    wait_for_webhook_ready(full_cluster, NAMESPACE)
    history = full_cluster.helm("history", RELEASE, "-n", NAMESPACE, "-o", "json").stdout
    assert [entry["revision"] for entry in json.loads(history)][-1] == 2

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

