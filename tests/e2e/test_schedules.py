"""Issue 13, "scheduled profiling, kept and browsable", against the real one-node cluster: a
namespace's `sidecar-debug.io/schedule` annotation picks the matching injected pod, the
schedules pass (webhook.schedules.runner.tick, what `sidecar-debug controller` runs while it
leads) records it with perf through pods/exec in its toolset sidecar, copies the folded stacks
back and stores them; the results page lists the run and draws the Node app's hot function."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.cluster import Cluster
from tests.e2e.conftest import apply, wait_pod_running

pytestmark = [pytest.mark.cluster, pytest.mark.full, pytest.mark.timeout(1200)]

MakeNamespace = Callable[..., str]


def node_pod(name: str, namespace: str, app: str, image: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": app},
                     "annotations": {"sidecar-debug.io/runtime": "node"}},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "app", "image": image, "imagePullPolicy": "Never",
                            "resources": {"requests": {"cpu": "50m", "memory": "32Mi"}}}],
        },
    }


def test_namespace_schedule_records_the_selected_pod_and_the_page_shows_it(
        full_cluster: Cluster, chart_release: str, make_namespace: MakeNamespace,
        node_sample: str, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from webhook.kube import client as kube
    from webhook.results.store import Store
    from webhook.results.web import create_app
    from webhook.schedules import runner

    namespace = make_namespace("sched", {"debug": "enabled"})
    for name, app in (("web-b", "web"), ("web-a", "web"), ("batch-0", "batch")):
        apply(full_cluster, node_pod(name, namespace, app, node_sample))
    for name in ("web-a", "web-b", "batch-0"):
        wait_pod_running(full_cluster, namespace, name)
    schedule = {"cron": "* * * * *", "duration": "5s", "technique": "perf",
                "selector": {"matchLabels": {"app": "web"}}, "maxPods": 1}
    full_cluster.kubectl("annotate", "namespace", namespace,
                         f"sidecar-debug.io/schedule={json.dumps(schedule)}")

    api = kube.api_client(str(full_cluster.kubeconfig))
    results = tmp_path / "results"
    results.mkdir()
    with caplog.at_level(logging.INFO, logger="webhook.schedules.runner"):
        # First seen within its minute: due now (every minute), run in the foreground here.
        runner.tick(api, datetime.now(UTC), results, background=False, environ={})
    print("\n" + "\n".join(r.getMessage() for r in caplog.records))

    runs = Store(results).runs()
    assert [run.pod for run in runs] == ["web-a"], caplog.text  # by name, maxPods 1, app=web
    run = runs[0]
    assert run.technique == "perf" and run.meta["schedule"] == f"namespace/{namespace}#0"
    assert run.meta["container"] == "debug-toolset"
    hottest = run.meta["hottest"][0]
    assert "fibonacci" in hottest[0] and hottest[1] / run.samples > 0.5, run.meta
    print(f"stored {run.id}: {run.samples} samples, hottest {hottest}")

    # The same minute again: nothing new (once per cron minute).
    runner.tick(api, datetime.now(UTC), results, background=False, environ={})
    assert len(Store(results).runs()) in (1, 2)  # 2 only if the minute turned meanwhile

    client = create_app(results).test_client()
    listed = client.get("/api/runs").get_json()
    assert run.id in [item["id"] for item in listed]
    page = client.get(f"/runs/{run.id}/").get_data(as_text=True)
    assert "fibonacci" in page
    pprof = client.get(f"/runs/{run.id}/profile.pb.gz")
    assert pprof.status_code == 200 and pprof.data[:2] == b"\x1f\x8b"


def test_the_charts_controller_runs_the_schedule_and_its_page_serves_the_run(
        full_cluster: Cluster, chart_release: str, make_namespace: MakeNamespace,
        node_sample: str) -> None:
    """The whole chart path: results.enabled (emptyDir, one replica), the controller's leader
    runs the schedules pass in the cluster with its own ServiceAccount (templates/
    rbac-schedules.yaml), and the results container in its pod serves the run."""
    from tests.e2e.conftest import CHART, RELEASE_NAMESPACE, helm_values

    release = ["upgrade", chart_release, str(CHART), "-n", RELEASE_NAMESPACE, "--wait",
               "--timeout", "5m"]
    full_cluster.helm(*release, *helm_values(
        "--set", "results.enabled=true", "--set", "results.persistence.enabled=false",
        "--set", "controller.replicaCount=1", "--set", "controller.intervalSeconds=5"),
        timeout=400)
    try:
        namespace = make_namespace("sched-chart", {"debug": "enabled"})
        apply(full_cluster, node_pod("web-0", namespace, "web", node_sample))
        wait_pod_running(full_cluster, namespace, "web-0")
        full_cluster.kubectl("annotate", "namespace", namespace, "sidecar-debug.io/schedule="
                             + json.dumps({"cron": "* * * * *", "duration": "3s"}))
        controller = f"deployment/{chart_release}-controller"
        fetch = ("import urllib.request; print(urllib.request.urlopen("
                 "'http://127.0.0.1:8080/api/runs').read().decode())")

        def stored() -> list[dict[str, Any]] | None:
            result = full_cluster.kubectl("exec", "-n", RELEASE_NAMESPACE, controller, "-c",
                                          "results", "--", "python3", "-c", fetch, check=False)
            if result.returncode != 0:
                return None
            runs = [run for run in json.loads(result.stdout) if run["namespace"] == namespace]
            return runs or None

        from tests.e2e.conftest import wait_until

        runs = wait_until(stored, 240, "a scheduled run on the results page")
        assert runs[0]["pod"] == "web-0" and runs[0]["technique"] == "perf"
        assert runs[0]["samples"] > 0
        logs = full_cluster.kubectl("logs", "-n", RELEASE_NAMESPACE, controller, "-c",
                                    "controller").stdout
        print("\n" + "\n".join(line for line in logs.splitlines() if "schedule" in line))
        assert "schedules tick failed" not in logs
    finally:
        full_cluster.helm(*release, *helm_values(), timeout=400, check=False)
