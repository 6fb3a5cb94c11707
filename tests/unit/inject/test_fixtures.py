"""AdmissionReviews recorded from the real kube-apiserver (tests/fixtures/admission, refreshed by
record.py) through the whole review path: what the apiserver really sends, not hand-written JSON."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.unit.core_helpers import mutator, validate_pod
from webhook.admission.review import decode_patch
from webhook.inject.patch import apply_patch
from webhook.wire import constants

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "admission"
# Pod CREATE reviews; the UPDATE ones (pods/ephemeralcontainers, the guard's pod-update) are
# tests/unit/admission's.
CASES = sorted(
    path for path in FIXTURES.glob("*.json")
    if json.loads(path.read_text())["request"]["operation"] == "CREATE"
)


def load(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((FIXTURES / f"{name}.json").read_text())
    return loaded


def review(name: str) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """(request, response, patched pod) for one recorded case."""
    body = load(name)
    answer = mutator().review(body)
    request = body["request"]
    patched = apply_patch(request["object"], decode_patch(answer))
    return request, dict(answer["response"]), patched


def test_fixtures_exist() -> None:
    assert len(CASES) >= 7, "record them: python -m tests.fixtures.admission.record"


@pytest.mark.parametrize("case", CASES, ids=[c.stem for c in CASES])
def test_every_recorded_pod_is_injected_validly_and_uid_echoed(case: Path) -> None:
    request, response, patched = review(case.stem)
    assert response["uid"] == request["uid"]
    assert response["allowed"] is True
    assert patched["spec"]["containers"][0]["name"] == "debug-toolset"
    assert constants.ANNOTATION_STATUS in patched["metadata"]["annotations"]
    validate_pod(patched)
    # The apiserver re-invokes the webhook after other webhooks changed the pod: nothing to add.
    again = mutator().review({**load(case.stem), "request": {**request, "object": patched}})
    assert "patch" not in again["response"]


def test_replicaset_controller_pod_has_no_name_and_no_namespace_in_the_object() -> None:
    request, response, patched = review("deployment-replicaset-pod")
    assert (
        request["userInfo"]["username"] == "system:serviceaccount:kube-system:replicaset-controller"
    )
    assert "name" not in request["object"]["metadata"]
    assert patched["spec"]["shareProcessNamespace"] is True


def test_generate_name_pod_uses_the_request_namespace() -> None:
    request, _, patched = review("generatename-empty-namespace")
    assert not request["object"]["metadata"].get("namespace")
    assert request["namespace"] == "fixtures"
    assert patched["metadata"]["generateName"] == "generated-"


def test_dry_run_request_is_answered_like_any_other() -> None:
    request, response, _ = review("dry-run")
    assert request["dryRun"] is True
    assert response["patch"]


def test_host_pid_pod_keeps_host_pid_without_share_process_namespace() -> None:
    _, _, patched = review("hostpid")
    assert patched["spec"]["hostPID"] is True
    assert "shareProcessNamespace" not in patched["spec"]


def test_init_containers_untouched() -> None:
    request, _, patched = review("init-containers")
    assert patched["spec"]["initContainers"] == request["object"]["spec"]["initContainers"]


def test_existing_tmp_volume_is_the_one_the_sidecar_mounts() -> None:
    _, _, patched = review("tmp-volume")
    sidecar = patched["spec"]["containers"][0]
    tmp = next(m for m in sidecar["volumeMounts"] if m["mountPath"] == "/tmp")
    assert tmp["name"] == "scratch"
    assert "sidecar-debug-tmp" not in {v["name"] for v in patched["spec"]["volumes"]}


def test_service_account_token_mount_is_left_alone() -> None:
    request, _, patched = review("user-pod")
    app_before = request["object"]["spec"]["containers"][0]
    app_after = next(c for c in patched["spec"]["containers"] if c["name"] == app_before["name"])
    token = [m for m in app_before["volumeMounts"] if "serviceaccount" in m["mountPath"]]
    assert token and all(m in app_after["volumeMounts"] for m in token)
