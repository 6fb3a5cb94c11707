"""Issue 13, "sessions expire": `sidecar-debug controller` evicts a pod past a short
maxSessionDuration (after a PodDisruptionBudget stops blocking it), the Deployment's new pod comes
back without the sidecar once the namespace label is gone, and a standby controller takes over
within the Lease duration when the active one is killed.

The controllers run as host processes with the admin kubeconfig (as `sidecar-debug controller`
runs in the chart's Deployment, minus the pod)."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import signal
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.cluster import Cluster, free_port
from tests.e2e.conftest import (
    REPO,
    SIDECAR,
    apply,
    container_names,
    deployment_manifest,
    is_injected,
    pod_manifest,
    pods_of,
    upgrade_release,
    wait_pod_running,
    wait_until,
)

pytestmark = [pytest.mark.cluster, pytest.mark.full, pytest.mark.timeout(900)]

MakeNamespace = Callable[..., str]
LEASE_DURATION, RENEW_DEADLINE, RETRY = 6, 4, 1
SIDECAR_DEBUG = str(REPO / ".venv" / "bin" / "sidecar-debug")


def _policy(path: Path, namespace: str, max_session: str, on_expiry: str) -> Path:
    path.write_text(json.dumps({
        "apiVersion": "sidecar-debug.io/v1alpha1", "kind": "DebugPolicy",
        "metadata": {"name": "e2e-expiry"},
        "spec": {"rules": [{"name": "short-sessions", "match": {"namespaces": [namespace]},
                            "maxSessionDuration": max_session, "onExpiry": on_expiry}]},
    }))
    return path


class Controller:
    """One `sidecar-debug controller` host process."""

    def __init__(self, cluster: Cluster, workdir: Path, identity: str, lease_namespace: str,
                 policy: Path | None = None, sync_period: float = 2) -> None:
        self.identity = identity
        self.metrics_port = free_port()
        self.log_path = workdir / f"controller-{identity}.log"
        command = [
            SIDECAR_DEBUG, "controller", "--kubeconfig", str(cluster.kubeconfig),
            "--identity", identity, "--lease-namespace", lease_namespace,
            "--lease-name", "e2e-controller",
            "--lease-duration", str(LEASE_DURATION), "--renew-deadline", str(RENEW_DEADLINE),
            "--retry-period", str(RETRY), "--interval", str(sync_period),
            "--metrics-port", str(self.metrics_port), "--metrics-address", "127.0.0.1",
        ]
        if policy is not None:
            command += ["--policy", str(policy)]
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(command, stdout=self._log, stderr=subprocess.STDOUT,
                                        start_new_session=True,
                                        env={**os.environ, "KUBECONFIG": str(cluster.kubeconfig)})

    def metrics(self) -> str:
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as response:  # noqa: S310 - loopback
            return str(response.read().decode())

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def kill(self) -> None:
        """SIGKILL: no clean release of the Lease, as when a node dies."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=30)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill()
        self._log.close()


@pytest.fixture
def controllers(full_cluster: Cluster, tmp_path: Path) -> Iterator[Callable[..., Controller]]:
    started: list[Controller] = []

    def start(identity: str, lease_namespace: str, **kwargs: Any) -> Controller:
        controller = Controller(full_cluster, tmp_path, identity, lease_namespace, **kwargs)
        started.append(controller)
        return controller

    yield start
    for controller in started:
        controller.stop()


def _events(cluster: Cluster, namespace: str, reason: str) -> list[dict[str, Any]]:
    events = cluster.kubectl_json("get", "events", "-n", namespace)["items"]
    return [event for event in events if event.get("reason") == reason]


def test_overdue_pod_is_evicted_honouring_the_pdb_and_returns_without_the_sidecar(
        full_cluster: Cluster, chart_release: str, make_namespace: MakeNamespace,
        controllers: Callable[..., Controller], tmp_path: Path) -> None:
    namespace = make_namespace("expiry", {"debug": "enabled"})
    apply(full_cluster, deployment_manifest("web", namespace))
    pod = wait_until(lambda: next(iter(pods_of(full_cluster, namespace, "app=web")), None), 90,
                     "the Deployment's pod")
    pod = wait_pod_running(full_cluster, namespace, pod["metadata"]["name"])
    assert container_names(pod)[0] == SIDECAR and is_injected(pod)
    first = pod["metadata"]["name"]

    listing = subprocess.run([SIDECAR_DEBUG, "sessions", "-n", namespace, "--kubeconfig",
                              str(full_cluster.kubeconfig)], capture_output=True, text=True,
                             timeout=60)
    assert listing.returncode == 0, listing.stderr
    row = next(line for line in listing.stdout.splitlines() if line.startswith(first))
    assert " injected " in f" {row} " and "lttng" in row, listing.stdout

    # The debugging is over: the namespace is no longer opted in. A PDB protects the app.
    full_cluster.kubectl("label", "namespace", namespace, "debug-")
    pdb = {"apiVersion": "policy/v1beta1", "kind": "PodDisruptionBudget",
           "metadata": {"name": "web", "namespace": namespace},
           "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}}}
    full_cluster.kubectl("apply", "-f", "-", input=json.dumps(pdb))
    wait_until(lambda: full_cluster.kubectl_json("get", "pdb", "web", "-n", namespace)
               .get("status", {}).get("observedGeneration"), 60, "the PDB's status")

    policy = _policy(tmp_path / "policy.yaml", namespace, "15s", "evict")
    controller = controllers("solo", namespace, policy=policy)

    # Past 15 s the controller tries: the PDB refuses (429), the pod stays, an Event says so.
    blocked = wait_until(lambda: _events(full_cluster, namespace, "DebugSessionEvictionBlocked"),
                         90, "the eviction-blocked Event\n" + controller.log())
    assert blocked[0]["involvedObject"]["name"] == first
    assert full_cluster.kubectl_json("get", "pod", first, "-n", namespace)["metadata"].get(
        "deletionTimestamp") is None
    assert 'result="blocked"' in controller.metrics()

    full_cluster.kubectl("delete", "pdb", "web", "-n", namespace)

    def replacement() -> dict[str, Any] | None:
        for candidate in pods_of(full_cluster, namespace, "app=web"):
            if candidate["metadata"]["name"] != first and \
                    candidate["status"].get("phase") == "Running":
                return candidate
        return None

    new_pod = wait_until(replacement, 120, "the replacement pod\n" + controller.log())
    assert container_names(new_pod) == ["app"] and not is_injected(new_pod)
    assert _events(full_cluster, namespace, "DebugSessionEvicted")
    remaining = {p["metadata"]["name"]: p for p in pods_of(full_cluster, namespace, "app=web")}
    assert first not in remaining or remaining[first]["metadata"].get("deletionTimestamp")
    assert 'sidecar_debug_session_expiry_actions_total{action="evict",result="evicted"} 1.0' \
        in controller.metrics()


def _holder(cluster: Cluster, namespace: str) -> str | None:
    result = cluster.kubectl("get", "lease", "e2e-controller", "-n", namespace, "-o", "json",
                             check=False)
    if result.returncode != 0:
        return None
    return json.loads(result.stdout).get("spec", {}).get("holderIdentity") or None


def test_leader_failover_within_the_lease_duration(
        full_cluster: Cluster, chart_release: str, make_namespace: MakeNamespace,
        controllers: Callable[..., Controller]) -> None:
    namespace = make_namespace("lease")
    one = controllers("one", namespace)
    two = controllers("two", namespace)
    by_name = {"one": one, "two": two}
    leader = wait_until(lambda: _holder(full_cluster, namespace), 30, "a lease holder")
    standby = by_name["two" if leader == "one" else "one"]
    # Exactly one acts: the leader gauge is 1 on the holder and 0 on the other.
    wait_until(lambda: "sidecar_debug_controller_leader 1.0" in by_name[leader].metrics(), 15,
               "the leader's gauge")
    assert "sidecar_debug_controller_leader 0.0" in standby.metrics()
    time.sleep(3 * RETRY)
    assert _holder(full_cluster, namespace) == leader  # renewals keep it

    by_name[leader].kill()
    killed_at = time.monotonic()
    wait_until(lambda: _holder(full_cluster, namespace) == standby.identity,
               LEASE_DURATION + 3 * RETRY + 5, "the standby to take the lease\n" + standby.log())
    took = time.monotonic() - killed_at
    print(f"failover: {standby.identity} took the lease {took:.1f} s after {leader} was killed "
          f"(lease duration {LEASE_DURATION} s, retry period {RETRY} s)")
    assert took <= LEASE_DURATION + 2 * RETRY + 2, took
    wait_until(lambda: "sidecar_debug_controller_leader 1.0" in standby.metrics(), 10,
               "the new leader's gauge")
    lease = full_cluster.kubectl_json("get", "lease", "e2e-controller", "-n", namespace)
    assert lease["spec"]["leaseTransitions"] >= 1


def test_an_attached_toolset_ends_itself_at_its_deadline_and_the_app_keeps_running(
        full_cluster: Cluster, chart_release: str, make_namespace: MakeNamespace,
        controllers: Callable[..., Controller], tmp_path: Path) -> None:
    """onExpiry stop without exec (issue 19): the release's policy gives sessions in `stop-*`
    namespaces 45 s; the webhook writes the attached toolset's deadline into its env, and the
    toolset ends itself then (exit 0). The controller, which holds no exec right, neither stops
    it nor reports it, since it ended in time. The pod, its app and its wiring stay."""
    from webhook.wire import constants

    rule = {"apiVersion": "sidecar-debug.io/v1alpha1", "kind": "DebugPolicy",
            "metadata": {"name": "e2e-stop"},
            "spec": {"rules": [{"name": "short-attached", "match": {"namespaces": ["stop-*"]},
                                "maxSessionDuration": "45s", "onExpiry": "stop"}]}}
    upgrade_release(full_cluster, chart_release,
                    "--set-json", f"policies.extra={json.dumps({'e2e-stop.yaml': rule})}")
    try:
        namespace = make_namespace("stop", {"debug": "enabled"})
        apply(full_cluster, pod_manifest("cart", namespace,
                                         annotations={"sidecar-debug.io/mode": "standby"}))
        wait_pod_running(full_cluster, namespace, "cart")
        attached = subprocess.run([SIDECAR_DEBUG, "attach", "cart", "-n", namespace,
                                   "--kubeconfig", str(full_cluster.kubeconfig)],
                                  capture_output=True, text=True, timeout=300)
        assert attached.returncode == 0, attached.stderr
        container = attached.stdout.splitlines()[0]
        pod = full_cluster.kubectl_json("get", "pod", "cart", "-n", namespace)
        [spec] = [c for c in pod["spec"]["ephemeralContainers"] if c["name"] == container]
        env = {e["name"]: e.get("value") for e in spec.get("env", [])}
        deadline = dt.datetime.fromisoformat(
            env[constants.ENV_SESSION_DEADLINE].replace("Z", "+00:00"))
        print(f"\n{container}: deadline {env[constants.ENV_SESSION_DEADLINE]} (written by the "
              "webhook)")

        def state() -> dict[str, Any]:
            pod = full_cluster.kubectl_json("get", "pod", "cart", "-n", namespace)
            statuses = pod["status"].get("ephemeralContainerStatuses", [])
            return dict(next(s for s in statuses if s["name"] == container)["state"])

        policy = _policy(tmp_path / "policy.yaml", namespace, "45s", "stop")
        controller = controllers("stopper", namespace, policy=policy)
        wait_until(lambda: "terminated" in state(), 150,
                   f"{container} to end itself\n" + controller.log())
        ended = dt.datetime.now(dt.UTC)
        terminated = state()["terminated"]
        print(f"ended {ended:%H:%M:%S} ({(ended - deadline).total_seconds():+.0f} s from the "
              f"deadline), exit code {terminated['exitCode']}")
        assert terminated["exitCode"] == 0, terminated
        assert ended >= deadline - dt.timedelta(seconds=2)  # at its deadline, not before
        pod = full_cluster.kubectl_json("get", "pod", "cart", "-n", namespace)
        assert pod["metadata"].get("deletionTimestamp") is None
        [app] = pod["status"]["containerStatuses"]
        assert app["name"] == "app" and "running" in app["state"] and app["restartCount"] == 0
        time.sleep(10)  # a few controller passes
        assert not _events(full_cluster, namespace, "DebugSessionExpired")  # it ended in time
        listing = subprocess.run([SIDECAR_DEBUG, "sessions", "-n", namespace, "--kubeconfig",
                                  str(full_cluster.kubeconfig)], capture_output=True, text=True,
                                 timeout=60)
        rows = [line.split() for line in listing.stdout.splitlines()[1:]]
        assert [row[:2] for row in rows] == [["cart", "standby"]], listing.stdout
    finally:
        upgrade_release(full_cluster, chart_release, check=False)
