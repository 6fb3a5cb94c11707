"""Issue 17 on the real one-node cluster with the chart installed: the guard (/validate-pods) keeps
a debug namespace Pod Security baseline for everyone except a granted, verified toolset.

bob may edit pods in the namespace and holds no debug grant; alice also holds `full`; the
service account `profiler` holds `full` too. Kubernetes 1.20 has no Pod Security admission: the
namespace enforces nothing but the guard, as one labelled `enforce=privileged` would.
"""

from __future__ import annotations

import copy
import json
import subprocess
from collections.abc import Callable
from typing import Any

import pytest

from tests.cluster.cluster import Cluster
from tests.e2e.conftest import (
    RELEASE,
    SIDECAR,
    STATUS_ANNOTATION,
    TOOLSET_IMAGE,
    app_container,
    container_names,
    deployment_manifest,
    pod_manifest,
    pods_of,
    pods_staying,
    wait_until,
)

pytestmark = [pytest.mark.cluster, pytest.mark.full, pytest.mark.timeout(900)]

MakeNamespace = Callable[..., str]
OVERDUE = "sidecar-debug.io/overdue-after"
EDITOR_RULES = [
    {"apiGroups": [""], "resources": ["pods"],
     "verbs": ["get", "list", "create", "update", "patch", "delete"]},
    {"apiGroups": [""], "resources": ["pods/ephemeralcontainers"],
     "verbs": ["get", "update", "patch"]},
    {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get", "create", "delete"]},
]  # fmt: skip


def _create(cluster: Cluster, manifest: dict[str, Any], user: str
            ) -> subprocess.CompletedProcess[str]:
    return cluster.kubectl("create", "-o", "json", "-f", "-", user=user, check=False,
                           input=json.dumps(manifest))


def _denied(result: subprocess.CompletedProcess[str], *words: str) -> str:
    """The refusal the user sees: from the guard, saying why."""
    assert result.returncode != 0, f"admitted: {result.stdout[:600]}"
    message = result.stderr
    assert "admission webhook" in message and "guard" in message, message
    for word in words:
        assert word in message, f"{word!r} not in {message}"
    return message


@pytest.fixture
def guarded(full_cluster: Cluster, chart_release: str, make_namespace: MakeNamespace) -> str:
    """A namespace opted in to injection (so guarded) where bob and alice edit pods, alice and
    the service account `profiler` hold the `full` profile."""
    namespace = make_namespace("guard", {"debug": "enabled"})
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "editor", "namespace": namespace}, "rules": EDITOR_RULES}
    full_cluster.kubectl("apply", "-f", "-", input=json.dumps(role))
    full_cluster.kubectl("create", "rolebinding", "editors", "-n", namespace, "--role=editor",
                         "--user=bob", "--user=alice")
    full_cluster.kubectl("create", "serviceaccount", "profiler", "-n", namespace)
    full_cluster.kubectl("create", "rolebinding", "full", "-n", namespace,
                         f"--clusterrole={RELEASE}-profile-full", "--user=alice",
                         f"--serviceaccount={namespace}:profiler")
    return namespace


def _pod(name: str, namespace: str, **spec: Any) -> dict[str, Any]:
    pod = pod_manifest(name, namespace)
    pod["spec"].update(spec)
    return pod


def _privileged(name: str, namespace: str) -> dict[str, Any]:
    pod = _pod(name, namespace)
    pod["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    return pod


def _host_root(name: str, namespace: str) -> dict[str, Any]:
    pod = _pod(name, namespace, volumes=[{"name": "host", "hostPath": {"path": "/"}}])
    pod["spec"]["containers"][0]["volumeMounts"] = [{"name": "host", "mountPath": "/host"}]
    return pod


def _hand_written_toolset(name: str, namespace: str) -> dict[str, Any]:
    """What the injector builds for `full`, written by hand (and opted out, so that the webhook
    does not inject over it)."""
    pod = _host_root(name, namespace)
    pod["metadata"]["labels"]["debug"] = "disabled"
    pod["spec"]["containers"].insert(0, {
        "name": SIDECAR, "image": TOOLSET_IMAGE, "imagePullPolicy": "Never",
        "command": ["toolset-entrypoint"], "securityContext": {"privileged": True},
        "env": [{"name": "SIDECAR_DEBUG_PROFILE", "value": "full"},
                {"name": "SIDECAR_DEBUG_GRANT", "value": "user:platform-admin"}],
        "volumeMounts": [{"name": "host", "mountPath": "/host"}],
    })
    return pod


def _forged_status(name: str, namespace: str) -> dict[str, Any]:
    """Issue 17's second case: the "already injected" skip, with a status claiming a grant."""
    pod = _hand_written_toolset(name, namespace)
    del pod["metadata"]["labels"]["debug"]
    pod["metadata"]["annotations"][STATUS_ANNOTATION] = json.dumps(
        {"profile": "full", "grant": "user:platform-admin", "container": SIDECAR,
         "version": "0.1.0"})
    return pod


def _toolset_image_app(name: str, namespace: str) -> dict[str, Any]:
    """No privilege at all, but the public toolset image with its own command: reserved."""
    pod = _pod(name, namespace)
    pod["spec"]["containers"].append({
        "name": "tools", "image": TOOLSET_IMAGE.replace(":0.1.0", "@sha256:" + "0" * 64),
        "imagePullPolicy": "Never", "command": ["sh", "-c", "sleep infinity"]})
    return pod


@pytest.mark.parametrize(("build", "why"), [
    (_privileged, "privileged"),
    (_host_root, "hostPath"),
    (_hand_written_toolset, "privileged"),
    (_forged_status, "privileged"),
    (_toolset_image_app, "toolset image"),
], ids=["privileged", "hostpath-root", "hand-written-toolset", "forged-status", "toolset-image"])
def test_an_editor_without_a_grant_cannot_create(
        full_cluster: Cluster, guarded: str, build: Callable[[str, str], dict[str, Any]],
        why: str) -> None:
    _denied(_create(full_cluster, build("attack", guarded), "bob"), why)


def test_a_deployment_cannot_smuggle_a_forged_toolset(full_cluster: Cluster, guarded: str) -> None:
    """The same pod from a Deployment: the ReplicaSet's pods are refused (FailedCreate)."""
    forged = _forged_status("x", guarded)
    deployment = deployment_manifest("forged", guarded)
    deployment["spec"]["template"] = {
        "metadata": {"labels": {"app": "forged"},
                     "annotations": forged["metadata"]["annotations"]},
        "spec": forged["spec"]}
    full_cluster.kubectl("apply", "-f", "-", user="bob", input=json.dumps(deployment))

    def refused() -> str:
        events = full_cluster.kubectl_json("get", "events", "-n", guarded)["items"]
        return "\n".join(e["message"] for e in events if e.get("reason") == "FailedCreate")

    message = wait_until(refused, 60, "the ReplicaSet's FailedCreate event")
    assert "guard" in message and "privileged" in message
    assert pods_of(full_cluster, guarded, "app=forged") == []


def test_an_editor_cannot_touch_the_webhooks_annotations(
        full_cluster: Cluster, guarded: str) -> None:
    created = _create(full_cluster, _pod("web", guarded), "bob")
    assert created.returncode == 0, created.stderr
    pod = json.loads(created.stdout)
    assert container_names(pod)[0] == SIDECAR  # lttng: bob holds no grant
    for change in (
        [f"{STATUS_ANNOTATION}-"],
        [f'{STATUS_ANNOTATION}={{"mode": "standby"}}', "--overwrite"],
        [f"{OVERDUE}=2999-01-01T00:00:00Z", "--overwrite"],
    ):
        result = full_cluster.kubectl("annotate", "pod", "web", "-n", guarded, *change,
                                      user="bob", check=False)
        _denied(result, "written by sidecar-debug's webhook and controller only")
    # Anything else stays editable (a metadata-only update runs nothing new).
    full_cluster.kubectl("label", "pod", "web", "-n", guarded, "team=shop", user="bob")
    stored = full_cluster.kubectl_json("get", "pod", "web", "-n", guarded)
    assert stored["metadata"]["annotations"][STATUS_ANNOTATION] == (
        pod["metadata"]["annotations"][STATUS_ANNOTATION])


def _put_ephemeral(cluster: Cluster, namespace: str, pod: str, container: dict[str, Any],
                   user: str) -> subprocess.CompletedProcess[str]:
    """What `attach` does on 1.20: PUT the pod's EphemeralContainers with one more."""
    path = f"/api/v1/namespaces/{namespace}/pods/{pod}/ephemeralcontainers"
    current = json.loads(cluster.kubectl("get", "--raw", path, user=user).stdout)
    current["ephemeralContainers"] = [*(current.get("ephemeralContainers") or []), container]
    return cluster.kubectl("replace", "--raw", path, "-f", "-", user=user, check=False,
                           input=json.dumps(current))


def test_an_editor_cannot_add_a_sysadmin_ephemeral_container(
        full_cluster: Cluster, guarded: str) -> None:
    """1.20 takes no securityContext on ephemeral containers: what a `sysadmin` debug container
    can still do there is run the toolset image, or mount the pod's hostPath volume."""
    created = _create(full_cluster, _pod("target", guarded), "alice")
    assert created.returncode == 0, created.stderr
    injected = json.loads(created.stdout)  # alice holds full: the pod has the header hostPaths
    host_volumes = [v["name"] for v in injected["spec"]["volumes"] if "hostPath" in v]
    assert host_volumes
    toolset = {"name": "sysadmin", "image": TOOLSET_IMAGE, "imagePullPolicy": "Never",
               "command": ["sh"], "stdin": True, "tty": True,
               "terminationMessagePolicy": "File"}
    _denied(_put_ephemeral(full_cluster, guarded, "target", toolset, "bob"), "toolset image")
    mounter = {"name": "host-reader", "image": app_container()["image"],
               "imagePullPolicy": "Never", "command": ["sh"], "terminationMessagePolicy": "File",
               "volumeMounts": [{"name": host_volumes[0], "mountPath": "/host",
                                 "readOnly": True}]}
    result = _put_ephemeral(full_cluster, guarded, "target", mounter, "bob")
    assert result.returncode != 0 and "hostPath" in result.stderr, result.stderr
    stored = full_cluster.kubectl_json("get", "pod", "target", "-n", guarded)
    assert not stored["spec"].get("ephemeralContainers")


def test_a_granted_user_still_gets_full(full_cluster: Cluster, guarded: str) -> None:
    created = _create(full_cluster, _pod("granted", guarded), "alice")
    assert created.returncode == 0, created.stderr
    pod = json.loads(created.stdout)
    status = json.loads(pod["metadata"]["annotations"][STATUS_ANNOTATION])
    assert (status["profile"], status["grant"]) == ("full", "user:alice")
    sidecar = pod["spec"]["containers"][0]
    assert sidecar["securityContext"]["privileged"] is True
    env = {e["name"]: e.get("value") for e in sidecar["env"]}
    assert env["SIDECAR_DEBUG_PROFILE"] == "full"
    assert env["SIDECAR_DEBUG_GRANT"] == "user:alice"
    assert env["SIDECAR_DEBUG_SESSION_STARTED"]


def test_a_deployment_with_a_granted_service_account_still_gets_full(
        full_cluster: Cluster, guarded: str) -> None:
    deployment = deployment_manifest("profiled", guarded)
    deployment["spec"]["template"]["spec"]["serviceAccountName"] = "profiler"
    full_cluster.kubectl("apply", "-f", "-", user="bob", input=json.dumps(deployment))
    pods = wait_until(lambda: pods_of(full_cluster, guarded, "app=profiled"), 90,
                      "the Deployment's pod")
    status = json.loads(pods[0]["metadata"]["annotations"][STATUS_ANNOTATION])
    assert status["profile"] == "full"
    assert status["grant"] == f"serviceaccount:{guarded}:profiler"


def test_reviews_the_guard_answered_are_in_its_metrics(
        full_cluster: Cluster, guarded: str) -> None:
    # An earlier test's helm upgrade may still be replacing the webhook's pods: the old ones
    # are going away (exec into them fails) and neither answers nor keeps this review's count.
    full_cluster.kubectl("rollout", "status", "deployment/sidecar-debug", "-n", "sidecar-debug",
                         "--timeout=180s", timeout=200)
    _denied(_create(full_cluster, _privileged("counted", guarded), "bob"), "privileged")
    pods = pods_staying(full_cluster, "sidecar-debug", "app.kubernetes.io/component=webhook")
    text = "".join(
        full_cluster.kubectl("exec", "-n", "sidecar-debug", p["metadata"]["name"], "--",
                             "python3", "-c",
                             "import ssl,urllib.request;print(urllib.request.urlopen("
                             "'https://127.0.0.1:8443/metrics',context=ssl._create_unverified"
                             "_context()).read().decode())").stdout
        for p in pods)
    assert 'sidecar_debug_guard_reviews_total{decision="denied",reason="pod-security"}' in text


def test_unlabelled_namespaces_are_not_guarded(
        full_cluster: Cluster, chart_release: str, make_namespace: MakeNamespace) -> None:
    namespace = make_namespace("plain")
    pod = copy.deepcopy(_privileged("privileged", namespace))
    created = _create(full_cluster, pod, "admin")
    assert created.returncode == 0, created.stderr
