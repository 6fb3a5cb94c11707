"""Issue 13, "standby": a pod pre-wired by the webhook (shared PID namespace, the shared emptyDirs,
runtime hints) with no toolset running; `attach` adds the toolset as an ephemeral container that
mounts those volumes, and `flamegraph` names the Node app's hot function through the shared perf
map. Also measures what a standby pod costs against an injected one and against none."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.cluster import NODE_NAME, Cluster
from tests.e2e.conftest import (
    REPO,
    SIDECAR,
    TOOLSET_IMAGE,
    apply,
    container_names,
    pod_manifest,
    wait_pod_running,
    wait_until,
)

pytestmark = [pytest.mark.cluster, pytest.mark.full, pytest.mark.timeout(1200)]

MakeNamespace = Callable[..., str]
MODE = "sidecar-debug.io/mode"
STATUS = "sidecar-debug.io/status"


def cli(cluster: Cluster, *args: str, timeout: float = 300,
        cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    command = [str(REPO / ".venv" / "bin" / "sidecar-debug"), *args,
               "--kubeconfig", str(cluster.kubeconfig)]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=cwd)


def transcript(result: subprocess.CompletedProcess[str], comment: str = "") -> None:
    """Shown with `pytest -s` (docs/standby.md quotes a run): the command without the
    kubeconfig, its stderr (progress) and stdout."""
    args = [str(a) for a in result.args]
    shown = ["sidecar-debug", *args[1:args.index("--kubeconfig")]]
    note = f"   # {comment}" if comment else ""
    print(f"\n$ {' '.join(shown)}{note}\n{result.stderr}{result.stdout}", end="")


def _exec(cluster: Cluster, namespace: str, pod: str, container: str, *command: str) -> str:
    return cluster.kubectl("exec", pod, "-n", namespace, "-c", container, "--",
                           *command).stdout


def _standby_node_pod(name: str, namespace: str, image: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": name},
                     "annotations": {MODE: "standby", "sidecar-debug.io/runtime": "node"}},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "containers": [{
                "name": "app", "image": image, "imagePullPolicy": "Never",
                # Kubernetes < 1.23 gives an ephemeral container no securityContext: the toolset
                # runs as root without CAP_PERFMON/SYS_PTRACE and may profile root's processes.
                "securityContext": {"runAsUser": 0},
                "resources": {"requests": {"cpu": "50m", "memory": "32Mi"}},
            }],
        },
    }


def test_standby_pod_then_attach_then_flamegraph(
        full_cluster: Cluster, chart_release: str, make_namespace: MakeNamespace,
        node_sample: str, tmp_path: Path) -> None:
    namespace = make_namespace("standby", {"debug": "enabled"})
    apply(full_cluster, _standby_node_pod("fib", namespace, node_sample))
    pod = wait_pod_running(full_cluster, namespace, "fib")

    # Pre-wired, nothing running: one container, the shared volumes, the runtime hint.
    assert container_names(pod) == ["app"]
    assert pod["spec"]["shareProcessNamespace"] is True
    status = json.loads(pod["metadata"]["annotations"][STATUS])
    assert status["mode"] == "standby" and "container" not in status, status
    app = pod["spec"]["containers"][0]
    mounts = {m["mountPath"]: m["name"] for m in app["volumeMounts"]}
    assert mounts.get("/tmp") == "sidecar-debug-tmp"
    assert mounts.get("/var/run/lttng") == "sidecar-debug-lttng"
    env = {e["name"]: e.get("value") for e in app.get("env", [])}
    assert "--perf-basic-prof" in env.get("NODE_OPTIONS", ""), env
    wait_until(lambda: "rate" in full_cluster.kubectl("logs", "fib", "-n", namespace).stdout,
               90, "the app's first throughput line")

    # No --image: attach builds the container from the installed chart's settings.
    attached = cli(full_cluster, "attach", "fib", "-n", namespace, "--profile", "perf")
    transcript(attached)
    assert attached.returncode == 0, attached.stdout + attached.stderr
    container = attached.stdout.splitlines()[0]
    assert container.startswith(SIDECAR + "-"), attached.stdout
    pod = full_cluster.kubectl_json("get", "pod", "fib", "-n", namespace)
    (ephemeral,) = pod["spec"]["ephemeralContainers"]
    assert ephemeral["name"] == container and ephemeral["image"] == TOOLSET_IMAGE, ephemeral
    assert ephemeral["targetContainerName"] == "app", ephemeral
    ephemeral_mounts = {m["mountPath"]: m["name"] for m in ephemeral.get("volumeMounts", [])}
    assert ephemeral_mounts.get("/tmp") == "sidecar-debug-tmp", ephemeral
    assert ephemeral_mounts.get("/var/run/lttng") == "sidecar-debug-lttng", ephemeral
    # No restart: the app container kept running through the attach.
    (app_status,) = pod["status"]["containerStatuses"]
    assert app_status["restartCount"] == 0

    # The app's perf map is in the shared /tmp, seen from the attached toolset.
    listing = _exec(full_cluster, namespace, "fib", container, "sh", "-c", "ls /tmp")
    assert any(name.startswith("perf-") and name.endswith(".map") for name in listing.split()), \
        listing
    # The LTTng session daemon the attached toolset started has its sockets in the shared
    # /var/run/lttng, visible to the app container.
    wait_until(lambda: "agent.port" in _exec(full_cluster, namespace, "fib", "app", "ls",
                                             "/var/run/lttng"), 60,
               "lttng-sessiond's agent.port in the app's /var/run/lttng")

    output = tmp_path / "standby.html"
    result = cli(full_cluster, "flamegraph", "fib", "-n", namespace, "--seconds", "5",
                 "-o", output.name, cwd=tmp_path)
    transcript(result)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "fibonacci" in output.read_text()
    # The hottest stack names the JIT-compiled function through the perf map.
    assert "fibonacci" in output.with_suffix(".folded").read_text().splitlines()[0]
    assert "fibonacci" in result.stdout.splitlines()[1], result.stdout


MIB = 1024 * 1024
CPU_WINDOW_SECONDS = 60


def _summary_pods(cluster: Cluster, namespaces: set[str]) -> dict[str, dict[str, Any]]:
    """The kubelet's summary API (/stats/summary through the apiserver's node proxy): per pod of
    `namespaces`, each container's and the pod cgroup's working set and cumulative CPU time."""
    summary = json.loads(cluster.kubectl(
        "get", "--raw", f"/api/v1/nodes/{NODE_NAME}/proxy/stats/summary").stdout)
    found: dict[str, dict[str, Any]] = {}
    for pod in summary.get("pods", []):
        if pod["podRef"]["namespace"] not in namespaces:
            continue

        def usage(stats: dict[str, Any]) -> dict[str, int]:
            return {"working_set": int((stats.get("memory") or {}).get("workingSetBytes") or 0),
                    "cpu_ns": int((stats.get("cpu") or {}).get("usageCoreNanoSeconds") or 0)}

        found[pod["podRef"]["name"]] = {
            "pod": usage(pod),
            "containers": {c["name"]: usage(c) for c in pod.get("containers", [])},
        }
    return found


def _cost_report(first: dict[str, dict[str, Any]], last: dict[str, dict[str, Any]],
                 seconds: float) -> dict[str, dict[str, Any]]:
    """Working set (MiB, at the end) and average CPU (millicores over the window) per pod,
    for the pod cgroup (containers + pause) and each container."""

    def entry(before: dict[str, int], after: dict[str, int]) -> dict[str, float]:
        return {"memory_working_set_mib": round(after["working_set"] / MIB, 1),
                "cpu_millicores": round((after["cpu_ns"] - before["cpu_ns"]) / seconds / 1e6, 2)}

    report: dict[str, dict[str, Any]] = {}
    for name, after in last.items():
        before = first[name]
        report[name] = {
            "pod": entry(before["pod"], after["pod"]),
            "containers": {c: entry(before["containers"][c], stats)
                           for c, stats in after["containers"].items()},
        }
    return report


def test_cost_of_standby_against_injected_and_none(
        full_cluster: Cluster, chart_release: str, make_namespace: MakeNamespace) -> None:
    """Three idle pods of the same app: not injected, standby, injected (`lttng`, the profile
    a namespace gets without a grant). After 30 s to settle, two readings of the kubelet's
    summary API 60 s apart give each pod's and container's working set and average CPU.
    Printed, and written to $SIDECAR_DEBUG_COST_REPORT when set (docs/standby.md quotes a run)."""
    plain_ns = make_namespace("cost-none")
    labelled = make_namespace("cost", {"debug": "enabled"})
    apply(full_cluster, pod_manifest("none", plain_ns))
    apply(full_cluster, pod_manifest("standby", labelled, annotations={MODE: "standby"}))
    apply(full_cluster, pod_manifest("injected", labelled,
                                     annotations={"sidecar-debug.io/profile": "lttng"}))
    pods = {
        "none": wait_pod_running(full_cluster, plain_ns, "none"),
        "standby": wait_pod_running(full_cluster, labelled, "standby"),
        "injected": wait_pod_running(full_cluster, labelled, "injected"),
    }
    assert container_names(pods["none"]) == ["app"]
    assert container_names(pods["standby"]) == ["app"]
    assert pods["standby"]["spec"].get("shareProcessNamespace") is True
    assert container_names(pods["injected"]) == [SIDECAR, "app"]
    time.sleep(30)

    def reading() -> dict[str, dict[str, Any]] | None:
        stats = _summary_pods(full_cluster, {plain_ns, labelled})
        complete = all(name in stats and stats[name]["pod"]["cpu_ns"]
                       and all(c["working_set"] and c["cpu_ns"]
                               for c in stats[name]["containers"].values())
                       for name in pods)
        return stats if complete else None

    first = wait_until(reading, 90, "kubelet stats for the three pods", interval=5)
    started = time.monotonic()
    time.sleep(CPU_WINDOW_SECONDS)
    last = wait_until(reading, 90, "kubelet stats for the three pods", interval=5)
    report = _cost_report(first, last, time.monotonic() - started)
    report = {name: report[name] for name in pods}
    print(json.dumps(report, indent=2))
    target = os.environ.get("SIDECAR_DEBUG_COST_REPORT")
    if target:
        Path(target).write_text(json.dumps(report, indent=2) + "\n")
    # What a user relies on: standby runs nothing beside the app, and costs what the app
    # costs; injected runs the idle toolset beside it, and that costs memory.
    assert set(report["standby"]["containers"]) == {"app"}
    assert set(report["injected"]["containers"]) == {SIDECAR, "app"}
    toolset = report["injected"]["containers"][SIDECAR]["memory_working_set_mib"]
    standby_extra = (report["standby"]["pod"]["memory_working_set_mib"]
                     - report["none"]["pod"]["memory_working_set_mib"])
    assert toolset > 1, report
    assert standby_extra < toolset / 2, report


def _debugger_role(cluster: Cluster, namespace: str, user: str) -> None:
    """What a developer needs to attach and profile: read pods, add ephemeral containers
    (1.20-1.21: update the subresource; 1.22+: patch), exec. No debugprofiles grant."""
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "debugger", "namespace": namespace},
        "rules": [
            {"apiGroups": [""], "resources": ["pods", "pods/log"], "verbs": ["get", "list"]},
            {"apiGroups": [""], "resources": ["pods/ephemeralcontainers"],
             "verbs": ["get", "update", "patch"]},
            {"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["create"]},
        ],
    }
    apply(cluster, role)
    cluster.kubectl("create", "rolebinding", f"debugger-{user}", "--role=debugger",
                    f"--user={user}", "-n", namespace)


def test_attach_of_a_privileged_profile_needs_the_requesters_grant(
        full_cluster: Cluster, chart_release: str, make_namespace: MakeNamespace) -> None:
    """The webhook gates `attach` like an injection: a developer who may add ephemeral
    containers but holds no grant for `perf` is refused, told which rolebinding would allow
    it, and nothing is added; with that rolebinding the same command attaches."""
    namespace = make_namespace("standby-gate", {"debug": "enabled"})
    apply(full_cluster, pod_manifest("idle", namespace, annotations={MODE: "standby"}))
    wait_pod_running(full_cluster, namespace, "idle")
    _debugger_role(full_cluster, namespace, "alice")
    alice = full_cluster.kubeconfig_for("alice")

    def attach_as_alice() -> subprocess.CompletedProcess[str]:
        command = [str(REPO / ".venv" / "bin" / "sidecar-debug"), "attach", "idle", "-n",
                   namespace, "--profile", "perf", "--kubeconfig", str(alice)]
        return subprocess.run(command, capture_output=True, text=True, timeout=300)

    refused = attach_as_alice()
    transcript(refused, "as alice, no grant")
    assert refused.returncode != 0, refused.stdout
    assert "perf" in refused.stderr and "kubectl create rolebinding" in refused.stderr, \
        refused.stderr
    assert "Traceback" not in refused.stderr
    pod = full_cluster.kubectl_json("get", "pod", "idle", "-n", namespace)
    assert not pod["spec"].get("ephemeralContainers"), pod["spec"]

    full_cluster.kubectl("create", "rolebinding", "alice-perf",
                         "--clusterrole=sidecar-debug-profile-perf", "--user=alice",
                         "-n", namespace)
    # The webhook caches RBAC verdicts for sarCacheSeconds (default 10 s).
    def attached_once_granted() -> subprocess.CompletedProcess[str] | None:
        result = attach_as_alice()
        return result if result.returncode == 0 else None

    attached = wait_until(attached_once_granted, 60, "alice's attach after the grant",
                          interval=4)
    transcript(attached, "as alice, after the rolebinding")
    container = attached.stdout.splitlines()[0]
    pod = full_cluster.kubectl_json("get", "pod", "idle", "-n", namespace)
    (ephemeral,) = pod["spec"]["ephemeralContainers"]
    assert ephemeral["name"] == container
    env = {e["name"]: e.get("value") for e in ephemeral.get("env", [])}
    # The webhook marks what it let through with the grant it saw.
    assert "SIDECAR_DEBUG_GRANT" in env, env
