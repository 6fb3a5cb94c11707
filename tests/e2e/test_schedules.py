"""Issue 19 on the real one-node cluster: scheduled profiling with the chart's defaults
(`results.enabled=true`, the default PersistentVolumeClaim bound to a local volume) and no exec
right anywhere in the chart. The webhook gives the injected toolset a projected token bound to
its pod and the results service's audience; the toolset's agent pulls its plan, records perf in
the sidecar and pushes the run; `sidecar-debug results open` shows it to a reader through a
port-forward with the reader's own token, and nothing to a reader without rights. A poisoned
annotation in another namespace leaves the schedule running (timed) and gets an Event on its
namespace; a perf schedule on a pod whose sidecar was downgraded to lttng is reported once on
that pod (issue 18 item 5). Issue 23: a `perf`-profile pod with its app as uid 10001 gets its
scheduled runs stored; a pod whose recording fails at run time (its app crash-looping) gets a
RecordingFailed Event and failed runs on the page, and after 3 failures is not asked again."""

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


def test_a_perf_profile_pod_records_as_a_non_root_app_and_a_failing_one_reaches_its_owner(
        full_cluster: Cluster, chart_release: str, make_namespace: MakeNamespace,
        node_sample: str, local_volume: str, tmp_path: Path) -> None:
    """Issue 23: two pods of the least-privileged profile that records flame graphs (`perf`),
    their app as uid 10001, a perf schedule every minute on each. `web` (the Node sample) gets
    its scheduled runs stored. `broken` is a bad deploy that keeps crashing at start (its
    script is missing): the pod stays Running with its toolset, but at run time there is no
    app process to record (`no-target`). Its owner sees each failure as a failed run on the
    results page (read as a reader of the namespace, through `results open`), the first as a
    RecordingFailed Event on the pod (one per schedule and reason per hour); the third
    suspends the recording on this pod with a RecordingSuspended Event, and the toolset is not
    asked again (item 7)."""
    upgrade_release(full_cluster, chart_release, "--set", "results.enabled=true")
    opened: list[Opened] = []
    namespace = make_namespace("owner", {"debug": "enabled"})
    opener = f"results-open-{namespace}"
    try:
        schedule = json.dumps({"cron": "* * * * *", "duration": "2s"})

        def perf_pod(name: str, command: list[str] | None = None) -> dict[str, Any]:
            manifest = node_pod(name, namespace, name, node_sample,
                                {"sidecar-debug.io/profile": "perf",
                                 "sidecar-debug.io/schedule": schedule})
            app = manifest["spec"]["containers"][0]
            app["securityContext"] = {"runAsUser": 10001, "runAsGroup": 10001,
                                      "runAsNonRoot": True, "allowPrivilegeEscalation": False}
            if command:
                app["command"] = command
            return manifest

        apply(full_cluster, perf_pod("web"))
        apply(full_cluster, perf_pod("broken", ["node", "/app/missing.js"]))
        web = wait_pod_running(full_cluster, namespace, "web")
        assert json.loads(web["metadata"]["annotations"]["sidecar-debug.io/status"])[
            "profile"] == "perf"

        def crashing() -> dict[str, Any] | None:
            pod = full_cluster.kubectl_json("get", "pod", "broken", "-n", namespace)
            states = {s["name"]: s for s in pod.get("status", {}).get("containerStatuses", [])}
            up = "running" in states.get("debug-toolset", {}).get("state", {})
            return pod if up and states.get("app", {}).get("restartCount", 0) >= 1 and \
                pod["status"].get("phase") == "Running" else None

        broken = wait_until(crashing, 180, "the broken app crashing, its toolset running",
                            interval=2)
        uid = broken["metadata"]["uid"]
        # A reader of the namespace, allowed to open the page (port-forward) and nothing more.
        full_cluster.kubectl("create", "rolebinding", "alice-results", "-n", namespace,
                             f"--clusterrole={chart_release}-results-reader", "--user=alice")
        full_cluster.kubectl("create", "role", opener, "-n", RELEASE_NAMESPACE,
                             "--verb=get,list,create", "--resource=pods,pods/portforward")
        full_cluster.kubectl("create", "rolebinding", opener, "-n", RELEASE_NAMESPACE,
                             f"--role={opener}", "--user=alice")
        alice = Opened(full_cluster, "alice", tmp_path)
        opened.append(alice)

        def runs_of(pod: str) -> list[dict[str, Any]]:
            status, body = alice.get("/api/runs")
            return [r for r in json.loads(body) if (r["namespace"], r["pod"]) == (namespace, pod)
                    ] if status == 200 else []

        started = time.monotonic()
        try:
            wait_until(lambda: len(runs_of("broken")) >= 3 and runs_of("web") or None, 330,
                       "three failed runs of broken, a stored run of web", interval=5)
        finally:
            for what, where in (([f"deployment/{chart_release}-results"], RELEASE_NAMESPACE),
                                (["broken", "-c", "debug-toolset"], namespace),
                                (["web", "-c", "debug-toolset"], namespace)):
                logs = full_cluster.kubectl("logs", "-n", where, *what, check=False)
                print(f"\n--- logs {' '.join(what)} ---\n{(logs.stdout + logs.stderr)[-4000:]}")
        third = time.monotonic()
        print(f"\npage opened to the third failed run: {third - started:.0f} s")

        # The perf profile records the non-root app: a stored run, its hot function named.
        stored = runs_of("web")
        assert stored and all(r["outcome"] == "stored" for r in stored), stored
        assert stored[0]["technique"] == "perf" and stored[0]["samples"] > 0
        status, stacks = alice.get(f"/runs/{stored[0]['id']}/stacks.folded")
        assert status == 200 and "fibonacci" in stacks

        # The crashing app: three failed runs on the page, with the reason and the line.
        failed = runs_of("broken")
        assert len(failed) == 3, failed
        for run in failed:
            assert (run["technique"], run["outcome"], run["reason"]) == (
                "perf", "failed", "no-target"), run
            # The crash-looping app is either gone or dies before perf attaches: one reason.
            assert ("no app process found" in run["message"]
                    or "exited before perf attached" in run["message"]), run
        status, page = alice.get("/")
        assert status == 200 and page.count('class="run failed"') == 3

        # The Events on the pod, as the apiserver keeps them.
        suspended = wait_until(lambda: events(full_cluster, namespace, "RecordingSuspended"),
                               60, "the RecordingSuspended Event")
        recorded = events(full_cluster, namespace, "RecordingFailed")
        print(json.dumps([(e["reason"], e["message"]) for e in recorded + suspended], indent=1))
        assert len(recorded) == 1 and len(suspended) == 1  # one per schedule and reason per hour
        for event in recorded + suspended:
            assert event["involvedObject"]["uid"] == uid and event["type"] == "Warning"
            assert event["source"]["component"] == "sidecar-debug-results"
        assert "failed (no-target): flamegraph exited 3: " in recorded[0]["message"]
        assert "2 more with this reason" in recorded[0]["message"]
        assert "suspended after 3 failures (no-target" in suspended[0]["message"]

        # Not asked again: a cron minute and more than a poll after the third failure.
        time.sleep(max(0.0, 80 - (time.monotonic() - third)))
        assert len(runs_of("broken")) == 3
        toolset_log = full_cluster.kubectl("logs", "-n", namespace, "broken", "-c",
                                           "debug-toolset").stdout
        assert toolset_log.count("recording perf for 2 s") == 3, toolset_log
        service_log = full_cluster.kubectl("logs", "-n", RELEASE_NAMESPACE,
                                           f"deployment/{chart_release}-results").stdout
        assert "suspended after 3 failures (no-target)" in service_log
        assert "Traceback" not in service_log
    finally:
        for opener_process in opened:
            opener_process.close()
        full_cluster.kubectl("delete", "role,rolebinding", opener, "-n", RELEASE_NAMESPACE,
                             "--ignore-not-found", check=False)
        upgrade_release(full_cluster, chart_release, check=False)
