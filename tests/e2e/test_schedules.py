"""Issue 19 on the real one-node cluster: scheduled profiling with the chart's defaults
(`results.enabled=true`, the default PersistentVolumeClaim bound to a local volume) and no exec
right anywhere in the chart. The webhook gives the injected toolset a projected token bound to
its pod and the results service's audience; the toolset's agent pulls its plan, records perf in
the sidecar and pushes the run; `sidecar-debug results open` shows it to a reader through a
port-forward with the reader's own token, and nothing to a reader without rights. A poisoned
annotation in another namespace leaves the schedule running (timed) and gets an Event on its
namespace; a perf schedule on a pod whose sidecar was downgraded to lttng is reported once on
that pod (issue 18 item 5)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.cluster import Cluster
from tests.e2e.conftest import (
    RELEASE_NAMESPACE,
    REPO,
    apply,
    upgrade_release,
    wait_pod_running,
    wait_until,
)

pytestmark = [pytest.mark.cluster, pytest.mark.full, pytest.mark.timeout(1500)]

MakeNamespace = Callable[..., str]
SIDECAR_DEBUG = str(REPO / ".venv" / "bin" / "sidecar-debug")
POISON = "- &a {cron: '0 0 31 2 *'}\n" + "- *a\n" * 3269  # the 3,270 crons in 16 KiB


def node_pod(name: str, namespace: str, app: str, image: str,
             annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": app},
                     "annotations": {"sidecar-debug.io/runtime": "node", **(annotations or {})}},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "app", "image": image, "imagePullPolicy": "Never",
                            "resources": {"requests": {"cpu": "50m", "memory": "32Mi"}}}],
        },
    }


class Opened:
    """`sidecar-debug results open` as a user: the page on a local port."""

    def __init__(self, cluster: Cluster, user: str, workdir: Path) -> None:
        self.log = workdir / f"open-{user}.log"
        self._out = open(self.log, "wb")  # noqa: SIM115 - closed in close()
        self.process = subprocess.Popen(
            [SIDECAR_DEBUG, "results", "open", "-n", RELEASE_NAMESPACE, "--port", "0",
             "--kubeconfig", str(cluster.kubeconfig_for(user))],
            stdout=self._out, stderr=subprocess.STDOUT, start_new_session=True,
            env={k: v for k, v in os.environ.items() if k != "KUBECONFIG"})

        def address() -> str | None:
            assert self.process.poll() is None, self.log.read_text()
            found = re.search(r"http://127\.0\.0\.1:\d+/", self.log.read_text())
            return found.group(0) if found else None

        self.url = str(wait_until(address, 60, f"results open as {user}", interval=0.3))

    def get(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(self.url.rstrip("/") + path,  # noqa: S310 - loopback
                                        timeout=60) as answer:
                return answer.status, answer.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()

    def close(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
        self._out.close()


def events(cluster: Cluster, namespace: str, reason: str) -> list[dict[str, Any]]:
    """Events of `reason` about objects in `namespace`, and about the Namespace itself (those
    live in `default`, as the apiserver wants for cluster-scoped objects)."""
    items = cluster.kubectl_json("get", "events", "-n", namespace)["items"]
    items += [e for e in cluster.kubectl_json("get", "events", "-n", "default")["items"]
              if e["involvedObject"].get("kind") == "Namespace"
              and e["involvedObject"].get("name") == namespace]
    return [e for e in items if e.get("reason") == reason]


def test_a_schedule_runs_with_the_charts_defaults_and_no_exec_right(
        full_cluster: Cluster, chart_release: str, make_namespace: MakeNamespace,
        node_sample: str, local_volume: str, tmp_path: Path) -> None:
    upgrade_release(full_cluster, chart_release, "--set", "results.enabled=true",
                    "--set", "controller.intervalSeconds=5")
    opened: list[Opened] = []
    try:
        # No exec right anywhere in what the chart installed.
        roles = (full_cluster.kubectl_json("get", "clusterroles,roles", "-A", "-l",
                                           f"app.kubernetes.io/instance={chart_release}")
                 ["items"])
        assert roles
        for role in roles:
            for rule in role.get("rules") or []:
                assert not {"pods/exec", "pods/attach", "*"} & set(rule["resources"]), role
        claim = full_cluster.kubectl_json("get", "pvc", f"{chart_release}-results", "-n",
                                          RELEASE_NAMESPACE)
        assert claim["spec"]["volumeName"] == local_volume

        shop = make_namespace("shop", {"debug": "enabled"})
        poisoned = make_namespace("poisoned", {"debug": "enabled"})
        full_cluster.kubectl("annotate", "namespace", poisoned,
                             f"sidecar-debug.io/schedule={POISON}")
        apply(full_cluster, node_pod("web-0", shop, "web", node_sample))
        # Asks for perf, created by a user who may edit the namespace but holds no grant (nor
        # does the pod's service account): the default policy downgrades its sidecar to lttng,
        # which cannot record perf.
        full_cluster.kubectl("create", "rolebinding", "carol-edit", "-n", shop,
                             "--clusterrole=edit", "--user=carol")
        apply(full_cluster, node_pod("web-lttng", shop, "web", node_sample,
                                     {"sidecar-debug.io/profile": "perf"}), user="carol")
        apply(full_cluster, node_pod("victim", poisoned, "web", node_sample))
        for namespace, name in ((shop, "web-0"), (shop, "web-lttng"), (poisoned, "victim")):
            pod = wait_pod_running(full_cluster, namespace, name)
            toolset = pod["spec"]["containers"][0]
            assert toolset["name"] == "debug-toolset"
            assert pod["metadata"]["labels"]["sidecar-debug.io/results-agent"] == "true"
        started = time.monotonic()
        full_cluster.kubectl("annotate", "namespace", shop, "sidecar-debug.io/schedule="
                             + json.dumps({"cron": "* * * * *", "duration": "3s",
                                           "maxPods": 2}))
        admin = Opened(full_cluster, "admin", tmp_path)
        opened.append(admin)

        def stored() -> list[dict[str, Any]] | None:
            status, body = admin.get("/api/runs")
            runs = [r for r in json.loads(body) if r["namespace"] == shop] if status == 200 \
                else []
            return runs or None

        try:
            [run] = wait_until(stored, 300, "a scheduled run, pushed by the toolset",
                               interval=3)
        except AssertionError:
            for what in ([f"deployment/{chart_release}-results"], ["web-0", "-c", "debug-toolset"],
                         [f"deployment/{chart_release}-controller"]):
                namespace = shop if what[0] == "web-0" else RELEASE_NAMESPACE
                logs = full_cluster.kubectl("logs", "-n", namespace, *what, check=False)
                print(f"\n--- logs {' '.join(what)} ---\n{(logs.stdout + logs.stderr)[-6000:]}")
            raise
        took = time.monotonic() - started
        print(f"\nannotation to stored run: {took:.0f} s; {run}")
        assert (run["pod"], run["technique"]) == ("web-0", "perf") and run["samples"] > 0
        status, page = admin.get(f"/runs/{run['id']}/stacks.folded")
        assert status == 200 and "fibonacci" in page
        # One store: every request through the Service's pod shows the same runs.
        answers = {admin.get("/api/runs")[1] for _ in range(6)}
        assert len({json.dumps(sorted(r["id"] for r in json.loads(a))) for a in answers}) == 1

        # A reader without rights in the namespace (but allowed to port-forward).
        full_cluster.kubectl("create", "role", "results-open", "-n", RELEASE_NAMESPACE,
                             "--verb=get,list,create", "--resource=pods,pods/portforward")
        full_cluster.kubectl("create", "rolebinding", "bob-results-open", "-n",
                             RELEASE_NAMESPACE, "--role=results-open", "--user=bob")
        bob = Opened(full_cluster, "bob", tmp_path)
        opened.append(bob)
        status, body = bob.get("/api/runs")
        assert status == 200 and not [r for r in json.loads(body) if r["namespace"] == shop]
        status, body = bob.get(f"/runs/{run['id']}/")
        assert status == 403 and "fibonacci" not in body

        # The lttng sidecar: reported once on its pod, never recorded.
        reported = wait_until(lambda: events(full_cluster, shop, "ScheduleTechniqueUnavailable"),
                              120, "the Event on the downgraded pod")
        assert [e["involvedObject"]["name"] for e in reported] == ["web-lttng"]
        assert "profile lttng" in reported[0]["message"]
        # The poisoned namespace: an Event on it, its pod records nothing.
        poison = wait_until(lambda: events(full_cluster, poisoned, "ScheduleInvalid"), 120,
                            "the Event on the poisoned namespace")
        assert "at most 20 per annotation" in poison[0]["message"]
        time.sleep(65)  # another minute of schedules
        runs = json.loads(admin.get("/api/runs")[1])
        assert not [r for r in runs if r["namespace"] == poisoned]
        assert {r["pod"] for r in runs if r["namespace"] == shop} == {"web-0"}
        assert len(events(full_cluster, shop, "ScheduleTechniqueUnavailable")) == 1
        service_log = full_cluster.kubectl("logs", "-n", RELEASE_NAMESPACE,
                                           f"deployment/{chart_release}-results").stdout
        assert "Traceback" not in service_log
    finally:
        for opener in opened:
            opener.close()
        upgrade_release(full_cluster, chart_release, check=False)
