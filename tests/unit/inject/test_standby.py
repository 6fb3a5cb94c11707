"""Standby: the inert wiring without a toolset, chosen per pod, per namespace or by default;
no grant needed, idempotent, and what `attach` later mounts is declared."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from tests.unit.core_helpers import default_settings, injected, settings_with
from tests.unit.policy.test_policy import (
    NOW,
    Clock,
    FakeCluster,
    policy_text,
    profile_name,
    request,
    write,
)
from webhook.config import load_settings
from webhook.errors import SettingsError
from webhook.inject import pipeline
from webhook.inject.workloads import inject_document
from webhook.policy.api import AllowAll, PolicyRequest, PolicyResult
from webhook.policy.engine import PolicyGate
from webhook.policy.loader import PolicyStore
from webhook.wire import constants

STANDBY = {constants.ANNOTATION_MODE: constants.MODE_STANDBY}


def pod(annotations: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "annotations": dict(annotations or {})},
        "spec": {"containers": [{"name": "app", "image": "node:20"}], **spec},
    }


def status(result: dict[str, Any]) -> dict[str, Any]:
    return dict(json.loads(result["metadata"]["annotations"][constants.ANNOTATION_STATUS]))


def test_standby_wires_the_pod_and_adds_no_container() -> None:
    result, response = injected(pod({**STANDBY, constants.ANNOTATION_RUNTIME: "node"}))
    spec = result["spec"]
    assert [c["name"] for c in spec["containers"]] == ["app"]
    assert "initContainers" not in spec
    assert spec["shareProcessNamespace"] is True
    mounts = {m["mountPath"]: m["name"] for m in spec["containers"][0]["volumeMounts"]}
    assert mounts == {"/tmp": "sidecar-debug-tmp", "/var/run/lttng": "sidecar-debug-lttng"}
    assert all("emptyDir" in v for v in spec["volumes"])  # no hostPath: nothing privileged
    env = {e["name"]: e["value"] for e in spec["containers"][0]["env"]}
    assert env["NODE_OPTIONS"] == "--perf-basic-prof"
    recorded = status(result)
    assert recorded["mode"] == "standby" and "container" not in recorded
    assert recorded["volumes"] == ["sidecar-debug-tmp", "sidecar-debug-lttng"]
    # kubectl's default container stays the app's (nothing was put in front of it).
    assert "kubectl.kubernetes.io/default-container" not in result["metadata"]["annotations"]
    assert response["allowed"]


def test_standby_is_idempotent() -> None:
    once, _ = injected(pod(STANDBY))
    twice, response = injected(once)
    assert twice == once
    assert response["auditAnnotations"]["reason"] == "already-injected"


def test_standby_job_has_nothing_to_exit() -> None:
    result, _ = injected(pod(STANDBY, restartPolicy="Never"))
    assert [c["name"] for c in result["spec"]["containers"]] == ["app"]


@pytest.mark.parametrize(("default", "annotation", "expected"), [
    ("standby", None, "standby"),
    ("standby", "injected", "injected"),
    ("injected", "standby", "standby"),
    ("injected", " Standby ", "standby"),
])
def test_mode_from_annotation_else_setting(default: str, annotation: str | None,
                                           expected: str) -> None:
    annotations = {constants.ANNOTATION_MODE: annotation} if annotation else {}
    result, _ = injected(pod(annotations), settings=settings_with(default_mode=default))
    assert status(result).get("mode", "injected") == expected


def test_unknown_mode_is_refused_naming_the_known_ones() -> None:
    result, response = injected(pod({constants.ANNOTATION_MODE: "stanby"}))
    assert not response["allowed"] and response["status"]["code"] == 400
    assert "injected, standby" in response["status"]["message"]


def test_default_mode_setting_is_checked() -> None:
    with pytest.raises(SettingsError, match="defaultMode"):
        load_settings(environ={"SIDECAR_DEBUG_DEFAULT_MODE": "sleepy"})


class NamespacePolicy(AllowAll):
    """AllowAll plus a namespace mode label; records the look-ups."""

    def __init__(self, mode: str | None) -> None:
        super().__init__(grant="test")
        self.mode = mode
        self.asked: list[str] = []

    def namespace_mode(self, namespace: str) -> str | None:
        self.asked.append(namespace)
        return self.mode


def run(pod_: dict[str, Any], policy: NamespacePolicy) -> pipeline.PipelineResult:
    return pipeline.run(pod_, "team-a", default_settings(), policy)


def test_namespace_label_sets_the_default_and_the_pod_annotation_wins() -> None:
    policy = NamespacePolicy("standby")
    result = run(pod(), policy)
    assert status(result.pod)["mode"] == "standby" and policy.asked == ["team-a"]
    policy.asked.clear()
    result = run(pod({constants.ANNOTATION_MODE: "injected"}), policy)
    assert "mode" not in status(result.pod) and policy.asked == []  # not even asked


def test_a_bad_namespace_label_warns_and_uses_the_setting() -> None:
    result = run(pod(), NamespacePolicy("sleepy"))
    assert "mode" not in status(result.pod)
    assert any("label sidecar-debug.io/mode='sleepy'" in w for w in result.warnings)


def test_offline_inject_mode_flag() -> None:
    out = inject_document(pod(), default_settings(), mode="standby")
    assert status(out)["mode"] == "standby"
    assert out["metadata"]["annotations"][constants.ANNOTATION_MODE] == "standby"


# -- the policy gate --------------------------------------------------------------------------


def gate(tmp_path: Path, policy: str | None, cluster: FakeCluster) -> PolicyGate:
    settings = default_settings()
    path = write(tmp_path / "policy.yaml", policy) if policy else None
    settings = dataclasses.replace(settings, policy_path=path)
    clock = Clock()
    return PolicyGate(settings, PolicyStore(path, settings.profiles, clock=clock), cluster,
                      wall_clock=lambda: NOW, monotonic=clock)


def standby_request(profile: str = "full") -> PolicyRequest:
    return dataclasses.replace(request(default_settings(), profile), mode=constants.MODE_STANDBY)


def test_standby_needs_no_grant_even_for_a_privileged_profile(tmp_path: Path) -> None:
    cluster = FakeCluster()
    result: PolicyResult = gate(tmp_path, None, cluster).evaluate(standby_request("full"))
    assert (profile_name(result), result.allowed, result.reason) == ("full", True, "standby")
    assert result.grant == "unprivileged" and cluster.calls == []  # no SubjectAccessReview
    assert "attach" in result.message


def test_standby_respects_allowed_profiles_and_marks_no_expiry(tmp_path: Path) -> None:
    text = policy_text("allowedProfiles: [lttng]\nmode: downgrade\nmaxSessionDuration: 1h")
    result = gate(tmp_path, text, FakeCluster()).evaluate(standby_request("full"))
    assert profile_name(result) == "lttng" and result.reason == "not-allowed-by-policy"
    allowed = gate(tmp_path, text, FakeCluster()).evaluate(standby_request("lttng"))
    assert allowed.reason == "standby"
    assert allowed.annotations == {}  # no toolset runs: nothing expires


def test_the_gate_reads_the_namespace_mode_label(tmp_path: Path) -> None:
    cluster = FakeCluster()
    cluster.labels["team-a"] = {constants.LABEL_NAMESPACE_MODE: "standby"}
    policy = gate(tmp_path, None, cluster)
    assert policy.namespace_mode("team-a") == "standby"
    assert policy.namespace_mode("other") is None
    cluster.fail_namespace = True
    assert policy.namespace_mode("broken") is None  # unreadable: the settings' default
