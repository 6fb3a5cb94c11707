"""The policy gate inside the lead's mutation path (the WSGI app, AdmissionReview in and out)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from werkzeug.test import Client

from tests.unit.core_helpers import review_around
from tests.unit.policy.test_policy import (
    ALICE,
    REPLICASET_CONTROLLER,
    FakeCluster,
    make_gate,
    policy_text,
)
from webhook.admission.review import decode_patch
from webhook.config import Settings, load_settings
from webhook.server.app import create_app
from webhook.wire.identity import UserInfo


@pytest.fixture
def settings() -> Settings:
    return load_settings(environ={})


def review(user: UserInfo, profile: str = "full") -> dict[str, Any]:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "web-1",
            "namespace": "dev",
            "labels": {"debug": "enabled"},
            "annotations": {"sidecar-debug.io/profile": profile},
        },
        "spec": {"serviceAccountName": "app", "containers": [{"name": "app", "image": "app:1"}]},
    }
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "u-1",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": "dev",
            "operation": "CREATE",
            "userInfo": user,
            "object": pod,
        },
    }


def post(settings: Settings, gate: Any, body: dict[str, Any]) -> dict[str, Any]:
    reply = Client(create_app(settings, gate)).post("/mutate", json=body)
    assert reply.status_code == 200
    response: dict[str, Any] = reply.get_json()["response"]
    return response


def injected_status(response: dict[str, Any]) -> dict[str, Any]:
    patch = decode_patch(review_around(response))
    for op in patch:
        value = op.get("value")
        if op["path"] == "/metadata/annotations/sidecar-debug.io~1status":
            assert isinstance(value, str)
            return dict(json.loads(value))
        if op["path"] == "/metadata/annotations" and isinstance(value, dict):
            return dict(json.loads(value["sidecar-debug.io/status"]))
    raise AssertionError(f"no status annotation in {patch}")


def test_granted_service_account_gets_full(settings: Settings) -> None:
    cluster = FakeCluster()
    cluster.grant_sa("dev", "app", "full")
    response = post(settings, make_gate(settings, cluster), review(REPLICASET_CONTROLLER))
    assert response["allowed"] is True
    assert injected_status(response)["profile"] == "full"
    assert response["auditAnnotations"]["reason"] == "granted-serviceaccount"


def test_downgrade_is_visible_to_the_creator(settings: Settings) -> None:
    response = post(settings, make_gate(settings, FakeCluster()), review(ALICE))
    assert response["allowed"] is True
    assert injected_status(response)["profile"] == "lttng"
    assert response["auditAnnotations"]["reason"] == "no-rbac-grant"
    assert any("kubectl create rolebinding" in w for w in response.get("warnings", []))


def test_deny_rejects_with_the_grant_named(settings: Settings, tmp_path: Path) -> None:
    gate = make_gate(settings, FakeCluster(), policy_text("mode: deny"), tmp_path)
    response = post(settings, gate, review(REPLICASET_CONTROLLER))
    assert response["allowed"] is False
    message = response["status"]["message"]
    assert "debugprofiles.sidecar-debug.io 'full'" in message
    assert "--clusterrole=sidecar-debug-profile-full --serviceaccount=dev:app -n dev" in message


def test_overdue_annotation_is_written(settings: Settings, tmp_path: Path) -> None:
    gate = make_gate(settings, FakeCluster(), policy_text("maxSessionDuration: 2h"), tmp_path)
    response = post(settings, gate, review(ALICE, "lttng"))
    patch = json.dumps(decode_patch(review_around(response)))
    assert "2026-12-02T14:00:00Z" in patch and "overdue-after" in patch
