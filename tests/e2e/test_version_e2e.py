"""`sidecar-debug version` against the real apiserver (lite cluster): the chart installed by
helm is found by its Deployment's labels, with chart, app version and image; a user who may
not list Deployments gets the client version and one line saying why, exit 0."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster import Cluster

CHART = Path(__file__).resolve().parents[2] / "charts" / "sidecar-debug"
RELEASE, NAMESPACE = "sdv", "sd-version"
CLI = [sys.executable, "-m", "webhook.commands.cli"]

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def release(lite_cluster: Cluster) -> Iterator[Cluster]:
    cluster = lite_cluster
    cluster.helm("upgrade", "--install", RELEASE, str(CHART), "-n", NAMESPACE,
                 "--create-namespace", "--set", "certificates.mode=self")
    try:
        yield cluster
    finally:
        cluster.helm("uninstall", RELEASE, "-n", NAMESPACE, "--ignore-not-found", check=False)
        cluster.kubectl("delete", "namespace", NAMESPACE, "--ignore-not-found", "--wait=true",
                        check=False, timeout=180)


def version(cluster: Cluster, user: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, "version", "--kubeconfig", str(cluster.kubeconfig_for(user)),
                           *args], capture_output=True, text=True, timeout=60)


def test_version_names_the_installed_chart_and_webhook(release: Cluster) -> None:
    cluster = release
    deployment = next(
        d for d in cluster.kubectl_json("get", "deployments", "-n", NAMESPACE)["items"]
        if d["spec"]["template"]["metadata"]["labels"].get("app.kubernetes.io/component")
        == "webhook")
    image = deployment["spec"]["template"]["spec"]["containers"][0]["image"]
    server = cluster.kubectl_json("version")["serverVersion"]["gitVersion"]

    found = version(cluster, "admin", "-o", "json")
    assert found.returncode == 0, found.stderr
    document = json.loads(found.stdout)
    assert document["server"]["kubernetes"] == server
    assert document["problem"] == ""
    assert document["server"]["webhooks"] == [{
        "namespace": NAMESPACE, "deployment": deployment["metadata"]["name"],
        "release": RELEASE, "chart": "sidecar-debug-0.1.0", "appVersion": "0.1.0",
        "images": [image], "replicas": deployment["spec"]["replicas"], "readyReplicas": 0,
    }]
    text = version(cluster, "admin")
    assert text.returncode == 0
    assert text.stdout.splitlines() == [
        f"Client Version: sidecar-debug 0.1.0 (Python {sys.version.split()[0]})",
        f"Kubernetes Version: {server}",
        f"Webhook: {NAMESPACE}/{deployment['metadata']['name']} (release {RELEASE}): chart "
        f"sidecar-debug-0.1.0, app 0.1.0, image {image}, 0/{deployment['spec']['replicas']} "
        "ready",
    ]


def test_a_user_who_may_not_list_deployments_gets_the_client_and_why(release: Cluster) -> None:
    result = version(release, "alice")
    assert result.returncode == 0
    assert result.stdout.startswith("Client Version: sidecar-debug 0.1.0")
    [line] = result.stderr.splitlines()
    assert line.startswith("sidecar-debug version: cannot list the webhook's Deployments")
    assert "HTTP 403 Forbidden" in line and "alice" in line


def test_no_cluster_is_one_line_and_exit_0(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: gone\ncontexts:\n- name: gone\n"
        "  context: {cluster: gone, user: u}\nclusters:\n- name: gone\n  cluster:\n"
        "    server: https://127.0.0.1:9\nusers:\n- name: u\n  user: {token: x}\n")
    result = subprocess.run([*CLI, "version", "--kubeconfig", str(kubeconfig)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0
    assert result.stdout.startswith("Client Version: sidecar-debug 0.1.0")
    [line] = result.stderr.splitlines()
    assert line.startswith("sidecar-debug version: cannot reach the cluster's API server: ")
