"""Issue 13, "workloads keep their meaning": Jobs and CronJobs in a labelled namespace get the
sidecar and still complete (Kubernetes 1.20 has no native sidecars: the toolset exits with
the app), a failing Job still fails, and a Windows pod is left alone with a reason."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from tests.cluster.cluster import Cluster
from tests.e2e.conftest import (
    RELEASE_NAMESPACE,
    SIDECAR,
    WEBHOOK_IMAGE,
    apply,
    container_names,
    is_injected,
    wait_until,
)

pytestmark = [pytest.mark.cluster, pytest.mark.full, pytest.mark.timeout(900)]

MakeNamespace = Callable[..., str]


def _job_template(exit_code: int = 0, seconds: int = 4) -> dict[str, Any]:
    """A short batch task on the webhook image (python3): works a few seconds, then exits."""
    script = (
        "import sys, time\n"
        f"time.sleep({seconds})\n"
        "print('batch work done', flush=True)\n"
        f"sys.exit({exit_code})\n"
    )
    return {
        "metadata": {"labels": {"app": "batch"}},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "containers": [{
                "name": "app",
                "image": WEBHOOK_IMAGE,
                "imagePullPolicy": "Never",
                "command": ["python3", "-c", script],
                "resources": {"requests": {"cpu": "5m", "memory": "16Mi"}},
            }],
        },
    }


def _job(name: str, namespace: str, exit_code: int = 0) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"backoffLimit": 0, "template": _job_template(exit_code)},
    }


def _cronjob_api_version(cluster: Cluster) -> str:
    """batch/v1 CronJob exists from 1.21; 1.20 serves it only as batch/v1beta1."""
    resources = json.loads(cluster.kubectl("get", "--raw", "/apis/batch/v1").stdout)
    names = {resource["name"] for resource in resources.get("resources", [])}
    return "batch/v1" if "cronjobs" in names else "batch/v1beta1"


def _pods_of_job(cluster: Cluster, namespace: str, job: str) -> list[dict[str, Any]]:
    return list(cluster.kubectl_json("get", "pods", "-n", namespace, "-l",
                                     f"job-name={job}")["items"])


def _job_condition(cluster: Cluster, namespace: str, job: str) -> str | None:
    status = cluster.kubectl_json("get", "job", job, "-n", namespace).get("status", {})
    for condition in status.get("conditions") or []:
        if condition["type"] in ("Complete", "Failed") and condition["status"] == "True":
            return str(condition["type"])
    return None


def _terminated(pod: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {s["name"]: (s.get("state") or {}).get("terminated") or {}
            for s in pod["status"].get("containerStatuses") or []}


def _assert_sidecar_exited_with_the_app(pod: dict[str, Any], app_exit: int) -> None:
    assert container_names(pod)[0] == SIDECAR and is_injected(pod), container_names(pod)
    sidecar = pod["spec"]["containers"][0]
    env = {item["name"]: item.get("value") for item in sidecar.get("env", [])}
    assert env.get("SIDECAR_DEBUG_EXIT_WITH_APP") == "true", env
    assert env.get("SIDECAR_DEBUG_APP_CONTAINERS") == "app", env
    terminated = _terminated(pod)
    assert terminated[SIDECAR].get("exitCode") == 0, terminated
    assert terminated["app"].get("exitCode") == app_exit, terminated


def test_job_completes_and_a_failing_job_fails(
        full_cluster: Cluster, chart_release: str, make_namespace: MakeNamespace) -> None:
    namespace = make_namespace("jobs", {"debug": "enabled"})
    apply(full_cluster, _job("works", namespace))
    apply(full_cluster, _job("breaks", namespace, exit_code=3))

    assert wait_until(lambda: _job_condition(full_cluster, namespace, "works"), 180,
                      "Job works to finish") == "Complete"
    assert wait_until(lambda: _job_condition(full_cluster, namespace, "breaks"), 180,
                      "Job breaks to finish") == "Failed"

    (pod,) = _pods_of_job(full_cluster, namespace, "works")
    assert pod["status"]["phase"] == "Succeeded"
    _assert_sidecar_exited_with_the_app(pod, 0)
    logs = full_cluster.kubectl("logs", "-n", namespace, pod["metadata"]["name"],
                                "-c", "app").stdout
    assert "batch work done" in logs

    # The sidecar exits 0 either way: the app's failure stays the Job's failure.
    (failed,) = _pods_of_job(full_cluster, namespace, "breaks")
    assert failed["status"]["phase"] == "Failed"
    _assert_sidecar_exited_with_the_app(failed, 3)


def test_cronjob_runs_complete(
        full_cluster: Cluster, chart_release: str, make_namespace: MakeNamespace) -> None:
    """A real scheduled run (every minute): its Job completes with the sidecar in its pod."""
    namespace = make_namespace("cron", {"debug": "enabled"})
    cronjob = {
        "apiVersion": _cronjob_api_version(full_cluster), "kind": "CronJob",
        "metadata": {"name": "tick", "namespace": namespace},
        "spec": {
            "schedule": "*/1 * * * *",
            "concurrencyPolicy": "Forbid",
            "successfulJobsHistoryLimit": 3,
            "jobTemplate": {"spec": {"backoffLimit": 0, "template": _job_template()}},
        },
    }
    full_cluster.kubectl("apply", "-f", "-", input=json.dumps(cronjob))

    def completed_job() -> str | None:
        jobs = full_cluster.kubectl_json("get", "jobs", "-n", namespace)["items"]
        for job in jobs:
            name = job["metadata"]["name"]
            if name.startswith("tick-") and _job_condition(full_cluster, namespace, name):
                return str(name)
        return None

    # The first run starts at the next minute boundary (<= 60 s), then needs ~10-20 s.
    job = wait_until(completed_job, 150, "a Job of CronJob tick to finish", interval=3)
    assert _job_condition(full_cluster, namespace, job) == "Complete"
    (pod,) = _pods_of_job(full_cluster, namespace, job)
    assert pod["status"]["phase"] == "Succeeded"
    _assert_sidecar_exited_with_the_app(pod, 0)
    full_cluster.kubectl("delete", "cronjob", "tick", "-n", namespace, "--wait=false")


def _webhook_log_entries(cluster: Cluster, namespace: str) -> list[dict[str, Any]]:
    """The chart's webhook pods' JSON log lines about the mutation of pods of `namespace` (the
    guard's review of the same pod logs a line of its own, decision guard-allowed/-denied)."""
    entries: list[dict[str, Any]] = []
    pods = cluster.kubectl_json("get", "pods", "-n", RELEASE_NAMESPACE, "-l",
                                "app.kubernetes.io/component=webhook")["items"]
    for pod in pods:
        text = cluster.kubectl("logs", "-n", RELEASE_NAMESPACE, pod["metadata"]["name"]).stdout
        for line in text.splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if (isinstance(entry, dict) and entry.get("namespace") == namespace
                    and not str(entry.get("decision", "")).startswith("guard-")):
                entries.append(entry)
    return entries


def test_windows_pod_is_not_given_a_linux_sidecar(
        full_cluster: Cluster, chart_release: str, make_namespace: MakeNamespace) -> None:
    """Server-side dry run (the one node is Linux, so the pod could not run): the apiserver
    sends the review to the chart's webhook, which skips the pod and says why (reason
    unsupported-os in its log and the review's audit annotations). Its Linux twin in the same
    namespace is injected: the webhook was asked both times."""
    namespace = make_namespace("windows", {"debug": "enabled"})

    def pod(name: str, node_selector: dict[str, str]) -> dict[str, Any]:
        return {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"nodeSelector": node_selector,
                     "containers": [{"name": "app", "image": "example/app:1"}]},
        }

    def dry_run(manifest: dict[str, Any]) -> dict[str, Any]:
        out = full_cluster.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-",
                                   input=json.dumps(manifest)).stdout
        return dict(json.loads(out))

    windows = dry_run(pod("win", {"kubernetes.io/os": "windows"}))
    assert container_names(windows) == ["app"] and not is_injected(windows), windows["spec"]
    ours = [v["name"] for v in windows["spec"].get("volumes") or []
            if v["name"].startswith("sidecar-debug-")]
    assert not ours and not windows["spec"].get("shareProcessNamespace"), windows["spec"]
    linux = dry_run(pod("lin", {"kubernetes.io/os": "linux"}))
    assert SIDECAR in container_names(linux) and is_injected(linux), container_names(linux)

    def reasons() -> dict[str, str] | None:
        found = {str(e.get("pod")): str(e.get("reason"))
                 for e in _webhook_log_entries(full_cluster, namespace)}
        return found if {"win", "lin"} <= set(found) else None

    logged = wait_until(reasons, 30, "the webhook's log lines for both pods")
    assert logged["win"] == "unsupported-os", logged
