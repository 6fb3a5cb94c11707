"""Issue 3, points 2, 3, 4 and 6 on the full cluster with the chart's webhook pods."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from tests.cluster.cluster import Cluster
from tests.e2e.conftest import (
    RELEASE,
    SIDECAR,
    STATUS_ANNOTATION,
    apply,
    container_names,
    deployment_manifest,
    is_injected,
    pod_manifest,
    pods_of,
    wait_pod_running,
    wait_until,
)

pytestmark = [pytest.mark.cluster, pytest.mark.full]

MakeNamespace = Callable[..., str]


def _grant(cluster: Cluster, namespace: str, profile: str, *, serviceaccount: str | None = None,
           user: str | None = None) -> None:
    """Bind the chart's grant ClusterRole for `profile` (verb `use` on debugprofiles)."""
    subject = (["--serviceaccount", f"{namespace}:{serviceaccount}"] if serviceaccount
               else ["--user", str(user)])
    cluster.kubectl("create", "rolebinding", f"grant-{profile}-{serviceaccount or user}",
                    f"--clusterrole={RELEASE}-profile-{profile}", "-n", namespace, *subject)


def _running_pod(cluster: Cluster, namespace: str, selector: str) -> dict[str, Any]:
    pod = wait_until(lambda: next(iter(pods_of(cluster, namespace, selector)), None), 90,
                     f"a pod for {selector}")
    return wait_pod_running(cluster, namespace, pod["metadata"]["name"])


def _status(pod: dict[str, Any]) -> dict[str, Any]:
    return dict(json.loads(pod["metadata"]["annotations"][STATUS_ANNOTATION]))


def test_deployment_in_labelled_namespace_runs_injected(
        full_cluster: Cluster, chart_release: str, make_namespace: MakeNamespace) -> None:
    namespace = make_namespace("labelled", {"debug": "enabled"})
    _grant(full_cluster, namespace, "full", serviceaccount="default")
    apply(full_cluster, deployment_manifest("web", namespace, replicas=1))
    pod = _running_pod(full_cluster, namespace, "app=web")
    assert container_names(pod)[0] == SIDECAR, container_names(pod)
    assert pod["spec"]["shareProcessNamespace"] is True
    volumes = {volume["name"]: volume for volume in pod["spec"]["volumes"]}
    assert {"sidecar-debug-tmp", "sidecar-debug-lttng"} <= set(volumes)
    app = next(c for c in pod["spec"]["containers"] if c["name"] == "app")
    app_mounts = {m["mountPath"]: m["name"] for m in app["volumeMounts"]}
    assert app_mounts.get("/tmp") == "sidecar-debug-tmp"
    assert app_mounts.get("/var/run/lttng") == "sidecar-debug-lttng"
    assert _status(pod)["profile"] == "full"
    # Every container, the sidecar too, really started.
    statuses = {s["name"]: s for s in pod["status"]["containerStatuses"]}
    assert statuses[SIDECAR]["ready"] and statuses["app"]["ready"]


def test_unlabelled_namespace_is_not_injected(
        full_cluster: Cluster, chart_release: str, make_namespace: MakeNamespace) -> None:
    namespace = make_namespace("plain")
    apply(full_cluster, deployment_manifest("web", namespace))
    pod = _running_pod(full_cluster, namespace, "app=web")
    assert container_names(pod) == ["app"]
    assert not is_injected(pod)


def test_pod_label_opt_in_and_opt_out(
        full_cluster: Cluster, chart_release: str, make_namespace: MakeNamespace) -> None:
    plain = make_namespace("podlabel")
    apply(full_cluster, pod_manifest("opted-in", plain, labels={"debug": "enabled"}))
    pod = wait_pod_running(full_cluster, plain, "opted-in")
    assert container_names(pod)[0] == SIDECAR and is_injected(pod)

    labelled = make_namespace("optout", {"debug": "enabled"})
    apply(full_cluster, pod_manifest("opted-out", labelled, labels={"debug": "disabled"}))
    pod = wait_pod_running(full_cluster, labelled, "opted-out")
    assert container_names(pod) == ["app"] and not is_injected(pod)


def test_replicaset_pods_and_user_pods(
        full_cluster: Cluster, chart_release: str, make_namespace: MakeNamespace) -> None:
    """The ReplicaSet controller's pods are judged by the pod's service account, a user's own
    pod by the user: alice holds the `full` grant, the namespace's service account does not."""
    namespace = make_namespace("requesters", {"debug": "enabled"})
    full_cluster.kubectl("create", "rolebinding", "alice-edit", "--clusterrole=edit",
                         "--user=alice", "-n", namespace)
    _grant(full_cluster, namespace, "full", user="alice")

    apply(full_cluster, deployment_manifest("by-controller", namespace), user="alice")
    controller_pod = _running_pod(full_cluster, namespace, "app=by-controller")
    apply(full_cluster, pod_manifest("by-alice", namespace), user="alice")
    alice_pod = wait_pod_running(full_cluster, namespace, "by-alice")

    assert is_injected(controller_pod) and is_injected(alice_pod)
    assert _status(alice_pod)["profile"] == "full", _status(alice_pod)
    # Controllers never pass a grant on: without one for its service account, the RS pod is
    # downgraded to the profile that needs no privileges.
    assert _status(controller_pod)["profile"] == "lttng", _status(controller_pod)
    sidecar = next(c for c in controller_pod["spec"]["containers"] if c["name"] == SIDECAR)
    assert not (sidecar.get("securityContext") or {}).get("privileged")


def test_server_dry_run_returns_injected_pod_and_stores_nothing(
        full_cluster: Cluster, chart_release: str, make_namespace: MakeNamespace) -> None:
    namespace = make_namespace("dryrun", {"debug": "enabled"})
    out = full_cluster.kubectl("create", "--dry-run=server", "-o", "yaml", "-f", "-",
                               input=json.dumps(pod_manifest("dry", namespace))).stdout
    import yaml

    pod = yaml.safe_load(out)
    assert container_names(pod)[0] == SIDECAR
    assert is_injected(pod)
    missing = full_cluster.kubectl("get", "pod", "dry", "-n", namespace, check=False)
    assert missing.returncode != 0 and "NotFound" in missing.stderr


def test_exec_into_sidecar_sees_app_processes_and_shared_tmp(
        full_cluster: Cluster, chart_release: str, make_namespace: MakeNamespace) -> None:
    namespace = make_namespace("exec", {"debug": "enabled"})
    _grant(full_cluster, namespace, "full", serviceaccount="default")
    apply(full_cluster, pod_manifest("app", namespace))
    pod = wait_pod_running(full_cluster, namespace, "app")
    assert container_names(pod)[0] == SIDECAR

    def sidecar(*command: str) -> str:
        return full_cluster.kubectl("exec", "app", "-n", namespace, "-c", SIDECAR, "--",
                                    *command).stdout

    # The shared PID namespace: the app's python3 process is visible from the sidecar.
    commands = sidecar("sh", "-c", "cat /proc/[0-9]*/cmdline | tr '\\0' ' '")
    assert "app-was-here" in commands, commands
    # The shared /tmp: the app's file, and one the sidecar writes is seen by the app.
    assert wait_until(lambda: sidecar("cat", "/tmp/app-was-here") == "hello", 30,
                      "the app's file in the shared /tmp")
    sidecar("sh", "-c", "echo from-sidecar > /tmp/sidecar-was-here")
    seen = full_cluster.kubectl("exec", "app", "-n", namespace, "-c", "app", "--",
                                "cat", "/tmp/sidecar-was-here").stdout
    assert seen.strip() == "from-sidecar"
