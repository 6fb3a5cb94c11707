"""Issue 17, the guard's core against what a real Kubernetes 1.20 apiserver stores (lite
cluster: no node, the pods are stored, defaulted and given their service account token).

The toolset verification tolerates only what the apiserver and the webhook add: this checks
those tolerances on real stored pods, for every built-in profile, a Job's pod, and a toolset
added through the `pods/ephemeralcontainers` subresource as `attach` adds it on 1.20. Offline
`guard check` reads `kubectl get -o yaml` output the same way.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.cluster.cluster import Cluster
from tests.unit.core_helpers import default_settings
from webhook.guard import check, toolset
from webhook.inject.attach import attached_name, build_attach_container
from webhook.inject.workloads import inject_workload

pytestmark = [pytest.mark.cluster]

PROFILES = ("lttng", "perf", "bcc", "full")


@pytest.fixture
def namespace(lite_cluster: Cluster) -> Iterator[str]:
    name = f"guard-core-{uuid.uuid4().hex[:6]}"
    lite_cluster.kubectl("create", "namespace", name)
    # The token controller fills the default service account's secret; pods wait for it.
    lite_cluster.kubectl("wait", "--for=jsonpath={.secrets[0].name}", "serviceaccount/default",
                         "-n", name, "--timeout=60s", check=False)
    yield name
    lite_cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


def stored(cluster: Cluster, namespace: str, manifest: dict[str, Any]) -> dict[str, Any]:
    """`manifest` created in `namespace`, as the apiserver stores it."""
    created = cluster.kubectl("create", "-n", namespace, "-o", "json", "-f", "-",
                              input=json.dumps(manifest))
    pod: dict[str, Any] = json.loads(created.stdout)
    return pod


def injected_pod(name: str, profile: str, **spec: Any) -> dict[str, Any]:
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "annotations": {"sidecar-debug.io/profile": profile}},
           "spec": {"containers": [{"name": "app", "image": "registry.example/app:1"}], **spec}}
    result = inject_workload(pod, default_settings())
    assert result.changed, result.outcomes
    injected: dict[str, Any] = result.document  # the pod given, injected
    return injected


def test_every_profiles_sidecar_verifies_as_the_apiserver_stores_it(
    lite_cluster: Cluster, namespace: str
) -> None:
    settings = default_settings()
    for profile in PROFILES:
        for restart in ("Always", "Never"):
            pod = stored(lite_cluster, namespace,
                         injected_pod(f"{profile}-{restart.lower()}", profile,
                                      restartPolicy=restart))
            sidecar = pod["spec"]["containers"][0]
            # The apiserver added what the verification must tolerate, and nothing else.
            assert sidecar["terminationMessagePath"] == "/dev/termination-log"
            assert any(m["mountPath"] == toolset.SERVICE_ACCOUNT_MOUNT
                       for m in sidecar["volumeMounts"])
            report = toolset.verify_toolsets(pod, settings)
            assert [(t.container.name, t.profile) for t in report.toolsets] == [
                ("debug-toolset", profile)], report.violations
            assert report.violations == ()
            result = check.evaluate(pod, settings, "baseline", {profile}.__contains__)
            assert result.allowed, result.message()


def test_an_attached_toolset_verifies_as_the_subresource_stores_it(
    lite_cluster: Cluster, namespace: str
) -> None:
    """1.20: the EphemeralContainers object, and no securityContext on ephemeral containers."""
    settings = default_settings()
    pod = stored(lite_cluster, namespace, injected_pod("target", "bcc"))
    container = build_attach_container(
        pod, settings, settings.profiles["full"], name=attached_name("abc123"), target="app",
        with_security_context=False)
    container["env"].append({"name": "SIDECAR_DEBUG_GRANT", "value": "user:alice"})
    path = f"/api/v1/namespaces/{namespace}/pods/target/ephemeralcontainers"
    current = json.loads(lite_cluster.kubectl("get", "--raw", path).stdout)
    current["ephemeralContainers"] = [container]
    lite_cluster.kubectl("replace", "--raw", path, "-f", "-", input=json.dumps(current))
    pod = lite_cluster.kubectl_json("get", "pod", "target", "-n", namespace)
    [attached] = pod["spec"]["ephemeralContainers"]
    assert attached["terminationMessagePath"] == "/dev/termination-log"  # defaulted
    report = toolset.verify_toolsets(pod, settings)
    assert [(t.container.name, t.profile) for t in report.toolsets] == [
        ("debug-toolset", "bcc"), ("debug-toolset-abc123", "full")]
    result = check.evaluate(pod, settings, "baseline", lambda p: p == "bcc")
    # full not granted: the attached toolset is checked like any container; without a
    # securityContext on 1.20, what remains beyond baseline is the hostPaths it mounts, which
    # the granted sidecar's exemption does not cover once another container mounts them.
    assert {v.check for v in result.violations} == {"hostPathVolumes"}
    assert check.evaluate(pod, settings, "baseline", lambda p: True).allowed


def test_guard_check_reads_what_kubectl_get_prints(lite_cluster: Cluster, namespace: str) -> None:
    stored(lite_cluster, namespace, injected_pod("granted", "full"))
    plain = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "plain"},
             "spec": {"hostPID": True,
                      "containers": [{"name": "app", "image": "registry.example/app:1"}]}}
    stored(lite_cluster, namespace, plain)
    listing = lite_cluster.kubectl("get", "pods", "-n", namespace, "-o", "yaml").stdout
    result = subprocess.run([sys.executable, "-m", "webhook.commands.cli", "guard", "check",
                             "-f", "-"], input=listing.encode(), capture_output=True, timeout=60,
                            check=False)
    out = result.stdout.decode()
    assert result.returncode == 1, result.stderr
    assert "List '(no name)' items[1]: Pod 'plain': items[1].spec.hostPID: host namespaces" in out
    assert ("items[0]: Pod 'granted': note: container \"debug-toolset\" is the verified toolset "
            "of profile \"full\"") in out
    assert "Pod 'granted': would be denied" not in out
