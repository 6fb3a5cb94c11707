"""Huge pods (issue 12, item 7): above maxPodContainers or maxPatchBytes a pod that asks for
the sidecar is admitted without it, with a warning naming the limit and what to do, and the
container count is checked before any injection work."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.unit.core_helpers import admission_review, default_settings, settings_with
from webhook.admission.mutate import Mutator
from webhook.inject import pipeline
from webhook.wire import constants


def _pod(containers: int, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": "big", "labels": labels or {"debug": "enabled"}},
        "spec": {"containers": [{"name": f"c{i}", "image": "busybox"} for i in range(containers)]},
    }


def _response(settings: Any, pod: dict[str, Any]) -> dict[str, Any]:
    review: Any = Mutator(settings).review(admission_review(pod))
    response: dict[str, Any] = review["response"]
    return response


def test_ten_thousand_containers_are_admitted_without_the_sidecar_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def no_injection_work(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the injection pipeline ran for a pod over the limit")

    monkeypatch.setattr(pipeline, "run", no_injection_work)
    started = time.process_time()
    response = _response(default_settings(), _pod(10_000))
    elapsed = time.process_time() - started
    assert response["allowed"] is True
    assert "patch" not in response
    (warning,) = response["warnings"]
    assert "10000 containers, more than maxPodContainers (100)" in warning
    assert "admitted without the debug sidecar" in warning
    assert "raise maxPodContainers" in warning
    assert response["auditAnnotations"][constants.AUDIT_REASON] == "pod-too-large"
    assert elapsed < 5  # a sanity bound, not a speed target (bench/ has those)


def test_the_container_limit_counts_init_containers_and_is_configurable() -> None:
    pod = _pod(2)
    pod["spec"]["initContainers"] = [{"name": "init", "image": "busybox"}]
    response = _response(settings_with(max_pod_containers=2), pod)
    assert "3 containers, more than maxPodContainers (2)" in response["warnings"][0]
    assert "patch" not in response
    assert _response(settings_with(max_pod_containers=3), pod)["patch"]


def test_a_pod_that_does_not_ask_for_the_sidecar_gets_no_size_warning() -> None:
    response = _response(settings_with(max_pod_containers=2), _pod(5, {"debug": "disabled"}))
    assert response["allowed"] is True
    assert not any("maxPodContainers" in w for w in response.get("warnings", []))


def test_a_patch_over_the_limit_is_not_applied() -> None:
    injected = _response(default_settings(), _pod(1))
    assert injected["patch"]
    response = _response(settings_with(max_patch_bytes=200), _pod(1))
    assert response["allowed"] is True
    assert "patch" not in response
    assert "more than maxPatchBytes (200)" in response["warnings"][0]
