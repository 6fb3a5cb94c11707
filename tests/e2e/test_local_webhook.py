"""`sidecar-debug serve` as a local process behind a Service of the lite cluster.

The apiserver calls the webhook exactly as it calls the chart's pods (Service, TLS, caBundle),
but no node and no image is needed: this is the fast end-to-end check of the decisions
(namespace/pod opt-in, opt-out, controller vs user requests, dry-run).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.cluster.cluster import Cluster
from tests.cluster.webhooks import mutating_webhook_configuration
from tests.e2e.conftest import STATUS_ANNOTATION, local_webhook_server, wait_until

pytestmark = pytest.mark.cluster

WEBHOOK_NAMESPACE = "sidecar-debug-local"
SERVICE = "sidecar-debug-local"
CONFIGURATION = "sidecar-debug-local"
TOOLSET = "localhost/sidecar-debug/toolset:0.1.0"
SYSTEM_NAMESPACES = ["kube-system", "kube-public", "kube-node-lease", WEBHOOK_NAMESPACE]


def _configuration(ca_pem: bytes) -> dict[str, Any]:
    """The chart's two entries: namespaces opted in, and opted-in pods elsewhere."""
    not_system = {"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                  "values": SYSTEM_NAMESPACES}
    not_disabled = {"key": "debug", "operator": "NotIn", "values": ["disabled"]}
    by_namespace = mutating_webhook_configuration(
        CONFIGURATION, service=SERVICE, namespace=WEBHOOK_NAMESPACE, ca_pem=ca_pem,
        failure_policy="Ignore", reinvocation_policy="IfNeeded",
        namespace_selector={"matchLabels": {"debug": "enabled"},
                            "matchExpressions": [not_system]},
        object_selector={"matchExpressions": [not_disabled]},
    )
    by_pod = mutating_webhook_configuration(
        CONFIGURATION, service=SERVICE, namespace=WEBHOOK_NAMESPACE, ca_pem=ca_pem,
        failure_policy="Ignore", reinvocation_policy="IfNeeded",
        namespace_selector={"matchExpressions": [
            not_system, {"key": "debug", "operator": "NotIn", "values": ["enabled"]}]},
        object_selector={"matchLabels": {"debug": "enabled"}},
    )
    by_namespace["webhooks"][0]["name"] = "namespaces.sidecar-debug.io"
    pod_hook = by_pod["webhooks"][0]
    pod_hook["name"] = "pods.sidecar-debug.io"
    by_namespace["webhooks"].append(pod_hook)
    return by_namespace


@pytest.fixture(scope="module")
def local_webhook(lite_cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with local_webhook_server(
        lite_cluster,
        tmp_path_factory.mktemp("local-webhook"),
        service=SERVICE,
        namespace=WEBHOOK_NAMESPACE,
        env={
            "SIDECAR_DEBUG_TOOLSET_IMAGE": TOOLSET,
            "SIDECAR_DEBUG_WEBHOOK_NAMESPACE": WEBHOOK_NAMESPACE,
        },
        configuration=_configuration,
    ) as (cluster_ip, _):
        yield cluster_ip


def _namespace(cluster: Cluster, labels: dict[str, str] | None = None) -> str:
    name = f"local-{uuid.uuid4().hex[:6]}"
    cluster.kubectl("create", "namespace", name)
    for key, value in (labels or {}).items():
        cluster.kubectl("label", "namespace", name, f"{key}={value}")
    return name


def _pod(name: str, namespace: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
            "spec": {"containers": [{"name": "app", "image": "localhost/app:1",
                                     "command": ["sleep", "infinity"]}]}}


def _create(cluster: Cluster, manifest: dict[str, Any], user: str = "admin") -> dict[str, Any]:
    out = cluster.kubectl("create", "-f", "-", "-o", "json", user=user,
                          input=json.dumps(manifest)).stdout
    return dict(json.loads(out))


def _status(pod: dict[str, Any]) -> dict[str, Any] | None:
    raw = pod["metadata"].get("annotations", {}).get(STATUS_ANNOTATION)
    return json.loads(raw) if raw else None


def test_labelled_namespace_pod_is_injected(lite_cluster: Cluster, local_webhook: str) -> None:
    namespace = _namespace(lite_cluster, {"debug": "enabled"})
    pod = _create(lite_cluster, _pod("direct", namespace))
    names = [c["name"] for c in pod["spec"]["containers"]]
    assert names[0] == "debug-toolset", names
    assert pod["spec"].get("shareProcessNamespace") is True
    volumes = {v["name"] for v in pod["spec"]["volumes"]}
    assert {"sidecar-debug-tmp", "sidecar-debug-lttng"} <= volumes
    app = next(c for c in pod["spec"]["containers"] if c["name"] == "app")
    assert "/var/run/lttng" in {m["mountPath"] for m in app["volumeMounts"]}
    # The admin is in system:masters, so the SubjectAccessReview grants the default profile.
    status = _status(pod)
    assert status is not None and status["profile"] == "full", status


def test_unlabelled_namespace_is_left_alone(lite_cluster: Cluster, local_webhook: str) -> None:
    namespace = _namespace(lite_cluster)
    pod = _create(lite_cluster, _pod("plain", namespace))
    assert [c["name"] for c in pod["spec"]["containers"]] == ["app"]
    assert _status(pod) is None


def test_pod_label_opts_in_and_out(lite_cluster: Cluster, local_webhook: str) -> None:
    plain = _namespace(lite_cluster)
    opted_in = _create(lite_cluster, _pod("opt-in", plain, {"debug": "enabled"}))
    assert _status(opted_in) is not None
    labelled = _namespace(lite_cluster, {"debug": "enabled"})
    opted_out = _create(lite_cluster, _pod("opt-out", labelled, {"debug": "disabled"}))
    assert _status(opted_out) is None
    assert [c["name"] for c in opted_out["spec"]["containers"]] == ["app"]


def test_replicaset_pods_and_user_pods(lite_cluster: Cluster, local_webhook: str) -> None:
    """RS-created pods are judged by the pod's service account (no grant: downgraded);
    a user's direct pod by the user (admin: granted)."""
    namespace = _namespace(lite_cluster, {"debug": "enabled"})
    deployment = {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": namespace},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [
                                  {"name": "app", "image": "localhost/app:1"}]}}},
    }
    _create(lite_cluster, deployment)

    def rs_pod() -> dict[str, Any] | None:
        pods = lite_cluster.kubectl_json("get", "pods", "-n", namespace, "-l", "app=web")["items"]
        return pods[0] if pods else None

    pod = wait_until(rs_pod, 60, "the ReplicaSet controller to create a pod")
    status = _status(pod)
    assert status is not None, "RS pod in a labelled namespace must be injected"
    assert status["profile"] == "lttng", status  # no grant for serviceaccount default
    direct = _create(lite_cluster, _pod("by-admin", namespace))
    direct_status = _status(direct)
    assert direct_status is not None and direct_status["profile"] == "full", direct_status


def test_server_dry_run_returns_injected_pod_and_stores_nothing(
        lite_cluster: Cluster, local_webhook: str) -> None:
    namespace = _namespace(lite_cluster, {"debug": "enabled"})
    out = lite_cluster.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-",
                               input=json.dumps(_pod("dry", namespace))).stdout
    pod = json.loads(out)
    assert pod["spec"]["containers"][0]["name"] == "debug-toolset"
    assert _status(pod) is not None
    missing = lite_cluster.kubectl("get", "pod", "dry", "-n", namespace, check=False)
    assert missing.returncode != 0 and "NotFound" in missing.stderr
