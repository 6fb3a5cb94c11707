"""The harness itself: what later tests take for granted about the clusters."""

from __future__ import annotations

import json

import pytest

from tests.cluster.cluster import Cluster
from tests.e2e.conftest import WEBHOOK_IMAGE, wait_pod_running, wait_until

pytestmark = pytest.mark.cluster


def test_lite_rbac_admin_and_plain_users(lite_cluster: Cluster) -> None:
    assert lite_cluster.kubectl("auth", "can-i", "create", "pods").stdout.strip() == "yes"
    for user in ("alice", "bob"):
        answer = lite_cluster.kubectl("auth", "can-i", "create", "pods", user=user, check=False)
        assert answer.stdout.strip() == "no"
        denied = lite_cluster.kubectl("get", "pods", user=user, check=False)
        assert denied.returncode != 0 and "Forbidden" in denied.stderr
    whoami = lite_cluster.kubectl("auth", "can-i", "--list", user="alice").stdout
    assert "selfsubjectaccessreviews" in whoami


def test_lite_services_get_loopback_cluster_ips(lite_cluster: Cluster) -> None:
    service = lite_cluster.kubectl_json("get", "service", "kubernetes", "-n", "default")
    assert service["spec"]["clusterIP"].startswith("127.")
    assert lite_cluster.service_cidr.startswith("127.")


def test_lite_ephemeral_containers_feature_enabled(lite_cluster: Cluster) -> None:
    resources = lite_cluster.kubectl("get", "--raw", "/api/v1").stdout
    assert "pods/ephemeralcontainers" in resources


@pytest.mark.full
def test_full_node_runs_pods_services_dns_and_exec(full_cluster: Cluster,
                                                   node_images: dict[str, str]) -> None:
    """A pod runs, reaches the API through the kubernetes Service with its token, resolves a
    Service name, and `kubectl exec` works."""
    namespace = "harness-smoke"
    full_cluster.kubectl("delete", "namespace", namespace, "--ignore-not-found", "--wait=true",
                         timeout=120)
    full_cluster.kubectl("create", "namespace", namespace)
    probe = (
        "import json, os, socket, ssl, urllib.request\n"
        "sa = '/var/run/secrets/kubernetes.io/serviceaccount'\n"
        "host = os.environ['KUBERNETES_SERVICE_HOST']\n"
        "port = os.environ['KUBERNETES_SERVICE_PORT']\n"
        "context = ssl.create_default_context(cafile=sa + '/ca.crt')\n"
        "token = open(sa + '/token').read()\n"
        "request = urllib.request.Request(f'https://{host}:{port}/version',"
        " headers={'Authorization': 'Bearer ' + token})\n"
        "version = json.load(urllib.request.urlopen(request, context=context))\n"
        "address = socket.gethostbyname('kubernetes.default.svc.cluster.local')\n"
        "print(json.dumps({'version': version['gitVersion'], 'dns': address}))\n"
    )
    pod = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "smoke", "namespace": namespace},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "smoke", "image": WEBHOOK_IMAGE, "imagePullPolicy": "Never",
                            "command": ["sh", "-c", "python3 -c \"$PROBE\" && sleep 3600"],
                            "env": [{"name": "PROBE", "value": probe}]}],
            "terminationGracePeriodSeconds": 1,
        },
    }
    full_cluster.kubectl("apply", "-f", "-", input=json.dumps(pod))
    wait_pod_running(full_cluster, namespace, "smoke")

    def logged() -> dict[str, str] | None:
        logs = full_cluster.kubectl("logs", "smoke", "-n", namespace).stdout.strip()
        return json.loads(logs.splitlines()[-1]) if logs else None

    result = wait_until(logged, 60, "the in-cluster API probe")
    assert result["version"].startswith("v1.20")
    kubernetes_ip = full_cluster.kubectl_json(
        "get", "service", "kubernetes", "-n", "default")["spec"]["clusterIP"]
    assert result["dns"] == kubernetes_ip
    hostname = full_cluster.kubectl("exec", "smoke", "-n", namespace, "--", "hostname").stdout
    assert hostname.strip() == "smoke"
    full_cluster.kubectl("delete", "namespace", namespace, "--wait=false")
