"""Issue 13, "workloads keep their meaning": pods that run to completion get a toolset that exits
with the app (unless native sidecars do it), offline `inject` of Jobs and CronJobs does the same,
and pods bound for non-Linux nodes are skipped with a reason."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.unit.core_helpers import default_settings, injected, settings_with
from webhook.inject.decision import decide, foreign_os
from webhook.inject.sidecar import SESSION_FACTS
from webhook.inject.workloads import inject_document
from webhook.wire import constants

EXIT = constants.ENV_EXIT_WITH_APP
APPS = constants.ENV_APP_CONTAINERS


def pod(restart_policy: str | None = None, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"containers": [{"name": "app", "image": "busybox"}], **spec}
    if restart_policy is not None:
        body["restartPolicy"] = restart_policy
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": body}


def toolset_env(result: dict[str, Any]) -> dict[str, str]:
    spec = result["spec"]
    for container in (spec.get("initContainers") or []) + spec["containers"]:
        if container["name"] == constants.DEFAULT_SIDECAR_NAME:
            return {e["name"]: e.get("value", "") for e in container.get("env", [])}
    raise AssertionError("no toolset container")


@pytest.mark.parametrize("policy", ["Never", "OnFailure"])
def test_run_to_completion_pods_get_a_toolset_that_exits_with_the_app(policy: str) -> None:
    result, response = injected(pod(policy, containers=[{"name": "a", "image": "x"},
                                                        {"name": "b", "image": "y"}]))
    env = toolset_env(result)
    assert env[EXIT] == "true" and env[APPS] == "a,b"
    assert result["spec"]["shareProcessNamespace"] is True  # what the toolset detects with
    assert "warnings" not in response


@pytest.mark.parametrize("policy", [None, "Always"])
def test_long_running_pods_keep_an_idle_toolset(policy: str | None) -> None:
    env = toolset_env(injected(pod(policy))[0])
    assert EXIT not in env and APPS not in env


def test_native_sidecars_need_nothing() -> None:
    result, _ = injected(pod("Never"), settings=settings_with(native_sidecar=True))
    sidecar = result["spec"]["initContainers"][0]
    assert sidecar["restartPolicy"] == "Always"
    assert EXIT not in toolset_env(result)


def test_without_a_shared_pid_namespace_the_user_is_warned() -> None:
    result, response = injected(pod("Never", hostPID=True))
    assert toolset_env(result)[EXIT] == "true"
    assert any("cannot exit with the app" in w for w in response["warnings"])


# -- non-Linux pods ---------------------------------------------------------------------------


@pytest.mark.parametrize(("spec", "why"), [
    ({"os": {"name": "windows"}}, "spec.os.name is 'windows'"),
    ({"nodeSelector": {"kubernetes.io/os": "windows"}}, "nodeSelector kubernetes.io/os=windows"),
    ({"nodeSelector": {"beta.kubernetes.io/os": "Windows"}}, "beta.kubernetes.io/os=Windows"),
    ({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [
            {"matchExpressions": [{"key": "kubernetes.io/os", "operator": "In",
                                   "values": ["windows"]}]},
            {"matchExpressions": [{"key": "kubernetes.io/os", "operator": "In",
                                   "values": ["windows"]},
                                  {"key": "zone", "operator": "In", "values": ["a"]}]},
        ]}}}}, "affinity kubernetes.io/os in (windows)"),
])
def test_windows_pods_are_skipped_with_the_reason(spec: dict[str, Any], why: str) -> None:
    decision = decide(pod(**spec), "demo", default_settings())
    assert not decision.inject and decision.reason == "unsupported-os"
    assert why in decision.message and "Linux" in decision.message
    result, response = injected(pod(**spec))
    assert [c["name"] for c in result["spec"]["containers"]] == ["app"]
    assert response["auditAnnotations"]["reason"] == "unsupported-os"


@pytest.mark.parametrize("spec", [
    {"os": {"name": "linux"}},
    {"nodeSelector": {"kubernetes.io/os": "linux"}},
    # One term lets the pod onto Linux nodes, another leaves the OS open: both are injectable.
    {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "kubernetes.io/os", "operator": "In", "values": ["windows", "linux"]}]}]}}}},
    {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [
            {"matchExpressions": [{"key": "kubernetes.io/os", "operator": "In",
                                   "values": ["windows"]}]},
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}}}},
    # A NotIn windows is not "windows only".
    {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "kubernetes.io/os", "operator": "NotIn", "values": ["windows"]}]}]}}}},
    # Hostile or malformed shapes never crash and never count as Windows.
    {"nodeSelector": ["kubernetes.io/os", "windows"]},
    {"os": "windows"},
    {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [None, 3, {"matchExpressions": "windows"}]}}}},
    {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": []}}},
])
def test_linux_or_unpinned_pods_are_injected(spec: dict[str, Any]) -> None:
    assert foreign_os(pod(**spec)) is None


# -- offline inject -----------------------------------------------------------------------------


def job(kind: str, restart_policy: str | None = "Never") -> dict[str, Any]:
    template = pod(restart_policy)
    del template["apiVersion"], template["kind"]
    job_spec: dict[str, Any] = {"template": template}
    if kind == "Job":
        return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},
                "spec": job_spec}
    return {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "c"},
            "spec": {"schedule": "@hourly", "jobTemplate": {"spec": job_spec}}}


def template_of(document: dict[str, Any]) -> dict[str, Any]:
    if document["kind"] == "CronJob":
        return dict(document["spec"]["jobTemplate"]["spec"]["template"])
    return dict(document["spec"]["template"])


@pytest.mark.parametrize("kind", ["Job", "CronJob"])
def test_offline_job_and_cronjob_get_what_the_webhook_gives_their_pods(
        kind: str, capsys: pytest.CaptureFixture[str]) -> None:
    document = job(kind)
    out = inject_document(copy.deepcopy(document), default_settings())
    template = template_of(out)
    assert toolset_env(template)[EXIT] == "true"
    # offline inject warned about nothing (checked before the webhook's review logs)
    assert capsys.readouterr().err == ""
    # The same as the webhook patches into the Job controller's pod, but the session's facts
    # (written at admission: the webhook adds them to each pod made from the template).
    webhook_pod, _ = injected(pod("Never"))
    toolset = webhook_pod["spec"]["containers"][0]
    toolset["env"] = [e for e in toolset["env"] if e["name"] not in SESSION_FACTS]
    assert template["spec"]["containers"] == webhook_pod["spec"]["containers"]


@pytest.mark.parametrize("kind", ["Job", "CronJob"])
def test_offline_job_without_a_valid_restart_policy_warns(
        kind: str, capsys: pytest.CaptureFixture[str]) -> None:
    out = inject_document(job(kind, restart_policy=None), default_settings())
    assert toolset_env(template_of(out))[EXIT] == "true"
    err = capsys.readouterr().err
    assert f"{kind} pod template has restartPolicy (unset)" in err and "Never or OnFailure" in err


def test_offline_deployment_is_unchanged_in_this_respect() -> None:
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
                  "spec": {"selector": {}, "template": {"spec": pod()["spec"]}}}
    out = inject_document(deployment, default_settings())
    assert EXIT not in toolset_env(out["spec"]["template"])


def test_offline_windows_job_is_left_alone(capsys: pytest.CaptureFixture[str]) -> None:
    document = job("Job")
    document["spec"]["template"]["spec"]["nodeSelector"] = {"kubernetes.io/os": "windows"}
    out = inject_document(copy.deepcopy(document), default_settings())
    assert out == document
