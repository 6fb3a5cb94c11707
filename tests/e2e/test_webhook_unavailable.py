"""Issue 3, point 5, and issue 17: with the webhook scaled to 0, pods outside guarded namespaces
are still created (failurePolicy Ignore), without the sidecar and within the webhook timeout
plus a second; in a guarded namespace (labelled debug=enabled) they are refused, naming the
guard (failurePolicy Fail: its Pod Security may be relaxed for the sidecar). Back up, injection
resumes."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import pytest

from tests.cluster.cluster import Cluster
from tests.e2e.conftest import (
    RELEASE,
    RELEASE_NAMESPACE,
    SIDECAR,
    container_names,
    is_injected,
    pod_manifest,
    wait_for_webhook_ready,
    wait_until,
)

pytestmark = [pytest.mark.cluster, pytest.mark.full]


def _webhook_deployment(cluster: Cluster) -> str:
    # The release also runs the controller's Deployment: the webhook's selects its pods.
    deployments = [
        deployment
        for deployment in cluster.kubectl_json(
            "get", "deployments", "-n", RELEASE_NAMESPACE,
            "-l", f"app.kubernetes.io/instance={RELEASE}")["items"]
        if deployment["spec"]["selector"]["matchLabels"].get("app.kubernetes.io/component")
        == "webhook"
    ]  # fmt: skip
    assert len(deployments) == 1, [d["metadata"]["name"] for d in deployments]
    return str(deployments[0]["metadata"]["name"])


def _timeout_seconds(cluster: Cluster) -> int:
    configurations = cluster.kubectl_json("get", "mutatingwebhookconfigurations")["items"]
    return int(max(hook.get("timeoutSeconds", 10) for item in configurations
                   for hook in item["webhooks"]))


def _create(cluster: Cluster, manifest: dict[str, Any]) -> tuple[float, Any]:
    started = time.monotonic()
    result = cluster.kubectl("create", "-o", "json", "-f", "-", check=False,
                             input=json.dumps(manifest))
    return time.monotonic() - started, result


def test_pods_created_without_sidecar_while_webhook_is_down(
        full_cluster: Cluster, chart_release: str, make_namespace: Callable[..., str]) -> None:
    guarded = make_namespace("unavailable", {"debug": "enabled"})
    elsewhere = make_namespace("unavailable-pod-opt-in")
    # A pod to attach to while the webhook is down, created while it is up.
    full_cluster.kubectl("create", "-f", "-", input=json.dumps(pod_manifest("target", guarded)))
    deployment = _webhook_deployment(full_cluster)
    replicas = full_cluster.kubectl_json(
        "get", "deployment", deployment, "-n", RELEASE_NAMESPACE)["spec"]["replicas"]
    limit = _timeout_seconds(full_cluster) + 1
    full_cluster.kubectl("scale", "deployment", deployment, "-n", RELEASE_NAMESPACE,
                         "--replicas=0")
    try:
        wait_until(lambda: not full_cluster.kubectl_json(
            "get", "pods", "-n", RELEASE_NAMESPACE,
            "-l", "app.kubernetes.io/component=webhook")["items"], 120,
            "the webhook pods to be gone")
        # Another namespace, the pod opted in by its label: created without the sidecar.
        elapsed, result = _create(full_cluster, pod_manifest(
            "while-down", elsewhere, labels={"app": "while-down", "debug": "enabled"}))
        assert result.returncode == 0, result.stderr
        pod = json.loads(result.stdout)
        assert container_names(pod) == ["app"] and not is_injected(pod)
        assert elapsed <= limit, f"creation took {elapsed:.1f}s, limit {limit}s"
        # The guarded namespace: refused, and the message names the guard.
        _, result = _create(full_cluster, pod_manifest("while-down", guarded))
        assert result.returncode != 0, result.stdout
        assert 'failed calling webhook "guard.sidecar-debug.io"' in result.stderr, result.stderr
        assert [p["metadata"]["name"] for p in full_cluster.kubectl_json(
            "get", "pods", "-n", guarded)["items"]] == ["target"]
        # Nor is an ephemeral container added there (`kubectl debug`, `attach`): the gate fails
        # closed in guarded namespaces (it was failurePolicy Ignore).
        path = f"/api/v1/namespaces/{guarded}/pods/target/ephemeralcontainers"
        current = json.loads(full_cluster.kubectl("get", "--raw", path).stdout)
        current["ephemeralContainers"] = [{
            "name": "sysadmin", "image": pod_manifest("x", guarded)["spec"]["containers"][0][
                "image"], "command": ["sh"], "terminationMessagePolicy": "File"}]
        result = full_cluster.kubectl("replace", "--raw", path, "-f", "-", check=False,
                                      input=json.dumps(current))
        assert result.returncode != 0 and "ephemeral-guarded.sidecar-debug.io" in result.stderr, (
            result.stderr)
    finally:
        full_cluster.kubectl("scale", "deployment", deployment, "-n", RELEASE_NAMESPACE,
                             f"--replicas={replicas}")
    wait_for_webhook_ready(full_cluster, RELEASE_NAMESPACE)

    def injected_again() -> bool:
        name = f"after-{int(time.time() * 1000) % 100000}"
        out = full_cluster.kubectl("create", "-o", "json", "-f", "-",
                                   input=json.dumps(pod_manifest(name, guarded))).stdout
        return container_names(json.loads(out))[0] == SIDECAR

    # Endpoints and kube-proxy rules follow readiness within a few seconds.
    wait_until(injected_again, 60, "injection to resume", interval=2)
