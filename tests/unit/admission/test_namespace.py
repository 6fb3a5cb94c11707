"""The namespace-label gate: only subjects with `use` on debugprofiles/namespace-opt-in open a
namespace to injection by labelling it."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.policy.test_policy import ALICE, FakeCluster, make_gate
from webhook.admission.namespace import review_namespace
from webhook.admission.review import Request
from webhook.config import Settings, load_settings


@pytest.fixture
def settings() -> Settings:
    return load_settings(environ={})


def namespace(name: str, labels: dict[str, str] | None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if labels is not None:
        meta["labels"] = labels
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": meta}


def ns_request(
    operation: str, new: dict[str, Any] | None, old: dict[str, Any] | None = None
) -> Request:
    request: Request = {
        "uid": "u-1",
        "kind": {"group": "", "version": "v1", "kind": "Namespace"},
        "operation": operation,  # type: ignore[typeddict-item]
        "name": "team-a",
        "userInfo": ALICE,
    }
    if new is not None:
        request["object"] = new
    if old is not None:
        request["oldObject"] = old
    return request


def test_adding_the_label_without_the_grant_is_denied(settings: Settings) -> None:
    cluster = FakeCluster()
    review = review_namespace(
        ns_request("UPDATE", namespace("team-a", {"debug": "enabled"}), namespace("team-a", {})),
        make_gate(settings, cluster),
    )
    response = review["response"]
    assert response["uid"] == "u-1" and response["allowed"] is False
    assert response["status"]["code"] == 403
    message = response["status"]["message"]
    assert "'namespace-opt-in'" in message and "'alice' lacks" in message
    assert "--clusterrole=sidecar-debug-profile-namespace-opt-in --user=alice" in message
    assert response["auditAnnotations"] == {"decision": "deny", "reason": "no-rbac-grant"}
    [check] = cluster.calls
    assert (check.user, check.namespace, check.resource_name) == (
        "alice",
        "team-a",
        "namespace-opt-in",
    )
    assert check.groups == ("devs", "system:authenticated")


def test_with_the_grant_it_is_allowed(settings: Settings) -> None:
    cluster = FakeCluster()
    cluster.grants.add(("alice", "namespace-opt-in", "team-a"))
    review = review_namespace(
        ns_request("CREATE", namespace("team-a", {"debug": "enabled"})),
        make_gate(settings, cluster),
    )
    assert review["response"]["allowed"] is True
    assert review["response"]["auditAnnotations"]["reason"] == "granted-user"


@pytest.mark.parametrize(
    ("operation", "new", "old"),
    [
        ("CREATE", {"team": "a"}, None),
        ("UPDATE", {"debug": "enabled", "x": "y"}, {"debug": "enabled"}),  # already open
        ("UPDATE", {}, {"debug": "enabled"}),  # closing is always fine
        ("UPDATE", {"debug": "disabled"}, {"debug": "enabled"}),
        ("UPDATE", {"debug": "maybe"}, {}),  # not the opt-in value
        ("DELETE", None, {"debug": "enabled"}),
    ],
)
def test_changes_that_do_not_open_the_namespace_need_no_check(
    settings: Settings, operation: str, new: dict[str, str] | None, old: dict[str, str] | None
) -> None:
    cluster = FakeCluster()
    request = ns_request(
        operation,
        namespace("team-a", new) if new is not None else None,
        namespace("team-a", old) if old is not None else None,
    )
    assert review_namespace(request, make_gate(settings, cluster))["response"]["allowed"] is True
    assert cluster.calls == []


def test_changing_disabled_to_enabled_is_checked(settings: Settings) -> None:
    cluster = FakeCluster()
    request = ns_request(
        "UPDATE",
        namespace("team-a", {"debug": "enabled"}),
        namespace("team-a", {"debug": "disabled"}),
    )
    assert review_namespace(request, make_gate(settings, cluster))["response"]["allowed"] is False
    assert len(cluster.calls) == 1


def test_custom_label_settings(settings: Settings) -> None:
    import dataclasses

    custom = dataclasses.replace(settings, label_key="example.com/debug", label_enabled="on")
    cluster = FakeCluster()
    request = ns_request("CREATE", namespace("team-a", {"example.com/debug": "on"}))
    response = review_namespace(request, make_gate(custom, cluster))["response"]
    assert response["allowed"] is False and "example.com/debug=on" in response["status"]["message"]


def test_apiserver_error_denies_the_label(settings: Settings) -> None:
    cluster = FakeCluster()
    cluster.fail_access = True
    response = review_namespace(
        ns_request("CREATE", namespace("team-a", {"debug": "enabled"})),
        make_gate(settings, cluster),
    )["response"]
    assert response["allowed"] is False
    assert response["auditAnnotations"]["reason"] == "rbac-check-failed"
    assert "try again" in response["status"]["message"]


def test_through_the_http_route(settings: Settings) -> None:
    from werkzeug.test import Client

    from webhook.server.app import create_app, namespace_gate

    gate = make_gate(settings, FakeCluster())
    app = create_app(settings, gate, namespace_gate(gate))
    body = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": ns_request("CREATE", namespace("team-a", {"debug": "enabled"})),
    }
    reply = Client(app).post("/validate-namespace", json=body)
    assert reply.status_code == 200
    assert reply.get_json()["response"]["allowed"] is False
