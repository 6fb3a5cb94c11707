"""The namespace-label gates: only subjects with `use` on debugprofiles/namespace-opt-in open a
namespace to injection by labelling it; only those with debugprofiles/namespace-guard change
what the guard holds (its label, or un-guarding by the opt-in label)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.policy.test_policy import ALICE, FakeCluster, make_gate
from webhook.admission.namespace import (
    review_namespace,
    review_namespace_guard,
    review_namespace_name,
)
from webhook.admission.review import Operation, Request, Response
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
    operation: Operation, new: dict[str, Any] | None, old: dict[str, Any] | None = None
) -> Request:
    request: Request = {
        "uid": "u-1",
        "kind": {"group": "", "version": "v1", "kind": "Namespace"},
        "operation": operation,
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
    settings: Settings, operation: Operation, new: dict[str, str] | None, old: dict[str, str] | None
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


# --- the guard label's gate (/validate-namespace-guard) ---------------------------------------

GUARD = "sidecar-debug.io/guard"


VERSION = "pod-security.kubernetes.io/enforce-version"


def guard_review(
    settings: Settings, cluster: FakeCluster, new: dict[str, str] | None,
    old: dict[str, str] | None, operation: Operation = "UPDATE",
) -> Response:
    request = ns_request(
        operation,
        namespace("team-a", new) if new is not None else None,
        namespace("team-a", old) if old is not None else None,
    )
    return review_namespace_guard(request, make_gate(settings, cluster))["response"]


@pytest.mark.parametrize(
    ("operation", "new", "old", "change"),
    [
        ("UPDATE", {GUARD: "baseline"}, {}, f"adding {GUARD}=baseline"),
        ("CREATE", {GUARD: "restricted"}, None, f"adding {GUARD}=restricted"),
        ("UPDATE", {}, {GUARD: "baseline"}, f"removing {GUARD}=baseline"),
        ("UPDATE", {"debug": "enabled"}, {"debug": "enabled", GUARD: "restricted"},
         f"removing {GUARD}=restricted"),
        ("UPDATE", {GUARD: "baseline"}, {GUARD: "restricted"},
         f"changing {GUARD} from restricted to baseline"),
        ("UPDATE", {}, {"debug": "enabled"}, "removing debug=enabled"),
        ("UPDATE", {"debug": "disabled"}, {"debug": "enabled"}, "removing debug=enabled"),
        # Issue 26 item 5: the guard applies the namespace's Pod Security version; pinning an
        # older one drops checks (here runAsUser, probe hosts, ...).
        ("UPDATE", {GUARD: "restricted", VERSION: "v1.20"}, {GUARD: "restricted"},
         f"changing {VERSION} from latest (unset) to v1.20, an older Pod Security version "
         "for the guard"),
        ("UPDATE", {"debug": "enabled", VERSION: "v1.33"}, {"debug": "enabled", VERSION: "v1.34"},
         f"changing {VERSION} from v1.34 to v1.33, an older Pod Security version for the guard"),
        ("CREATE", {GUARD: "baseline", VERSION: "v1.0"}, None, f"adding {GUARD}=baseline"),
    ],
    ids=["add", "create-with", "remove", "remove-beside-opt-in", "loosen", "unguard",
         "unguard-disabled", "pin-older-version", "lower-version", "create-pinned"],
)
def test_changing_what_the_guard_holds_needs_the_namespace_guard_grant(
    settings: Settings, operation: Operation, new: dict[str, str], old: dict[str, str] | None,
    change: str,
) -> None:
    cluster = FakeCluster()
    response = guard_review(settings, cluster, new, old, operation)
    assert response["allowed"] is False and response["status"]["code"] == 403
    message = response["status"]["message"]
    assert message.startswith(change) and "on namespace 'team-a'" in message
    assert "'namespace-guard', which 'alice' lacks" in message
    assert message.endswith(
        "kubectl create clusterrolebinding sidecar-debug-guard-alice "
        "--clusterrole=sidecar-debug-profile-namespace-guard --user=alice")
    assert response["auditAnnotations"] == {"decision": "deny", "reason": "no-rbac-grant"}
    [check] = cluster.calls
    assert (check.user, check.namespace, check.resource_name) == (
        "alice", "team-a", "namespace-guard")
    cluster.grants.add(("alice", "namespace-guard", "team-a"))
    response = guard_review(settings, cluster, new, old, operation)
    assert response["allowed"] is True
    assert response["auditAnnotations"] == {"decision": "allow", "reason": "granted-user"}


@pytest.mark.parametrize(
    ("operation", "new", "old"),
    [
        ("UPDATE", {GUARD: "baseline", "team": "b"}, {GUARD: "baseline", "team": "a"}),
        ("UPDATE", {GUARD: "restricted"}, {GUARD: "restricted", "debug": "enabled"}),
        ("UPDATE", {"debug": "enabled"}, {}),  # opening: the opt-in gate's, and stricter
        ("UPDATE", {"debug": "enabled", "x": "1"}, {"debug": "enabled"}),
        ("UPDATE", {"debug": "disabled"}, {}),
        ("CREATE", {"team": "a"}, None),
        ("DELETE", None, {GUARD: "restricted"}),
        ("UPDATE", {GUARD: "baseline"}, {GUARD: "baseline", VERSION: "v1.20"}),  # to latest
        ("UPDATE", {GUARD: "baseline", VERSION: "v1.30"}, {GUARD: "baseline", VERSION: "v1.20"}),
        ("UPDATE", {GUARD: "baseline", VERSION: "v1.x"}, {GUARD: "baseline", VERSION: "v1.20"}),
        ("UPDATE", {"team": "a", VERSION: "v1.0"}, {"team": "a"}),  # not guarded
    ],
    ids=["other-label", "unopen-still-guarded", "open", "still-open", "never-open", "plain",
         "delete", "version-to-latest", "version-newer", "version-invalid-is-latest",
         "version-unguarded"],
)
def test_changes_that_leave_the_guard_as_it_was_need_no_check(
    settings: Settings, operation: Operation, new: dict[str, str] | None,
    old: dict[str, str] | None,
) -> None:
    cluster = FakeCluster()
    assert guard_review(settings, cluster, new, old, operation)["allowed"] is True
    assert cluster.calls == []


@pytest.mark.parametrize("value", ["privileged", "Restricted", "", "off"])
def test_a_guard_label_naming_no_level_is_refused_even_with_the_grant(
    settings: Settings, value: str,
) -> None:
    cluster = FakeCluster()
    cluster.grants.add(("alice", "namespace-guard", "team-a"))
    response = guard_review(settings, cluster, {GUARD: value}, {GUARD: "baseline"})
    assert response["allowed"] is False and response["status"]["code"] == 400
    assert response["status"]["message"] == (
        f"{GUARD} must name a Pod Security level (baseline or restricted), got {value!r}; "
        "fix the label")


def test_exempt_and_excluded_namespaces_are_not_the_guards(settings: Settings) -> None:
    import dataclasses

    exempt = dataclasses.replace(settings, guard_exempt_namespaces=frozenset({"team-a"}))
    cluster = FakeCluster()
    assert guard_review(exempt, cluster, {}, {GUARD: "restricted"})["allowed"] is True
    request = ns_request("UPDATE", namespace("kube-system", {}),
                         namespace("kube-system", {GUARD: "baseline"}))
    assert review_namespace_guard(request, make_gate(settings, cluster))["response"]["allowed"]
    assert cluster.calls == []


def test_a_failed_check_refuses_the_guard_change(settings: Settings) -> None:
    cluster = FakeCluster()
    cluster.fail_access = True
    response = guard_review(settings, cluster, {}, {GUARD: "baseline"})
    assert response["allowed"] is False
    assert response["auditAnnotations"]["reason"] == "rbac-check-failed"
    assert response["status"]["message"].endswith("try again")


def test_a_malformed_namespace_review_gets_a_400(settings: Settings) -> None:
    request = ns_request("UPDATE", namespace("team-a", {}), {"metadata": {"labels": []}})
    response = review_namespace_guard(request, make_gate(settings, FakeCluster()))["response"]
    assert response["allowed"] is False and response["status"]["code"] == 400
    assert "request.oldObject.metadata.labels" in response["status"]["message"]


def test_the_guard_label_gate_through_the_http_route(settings: Settings) -> None:
    from werkzeug.test import Client

    from webhook.server.app import create_app, namespace_gate

    gate = make_gate(settings, FakeCluster())
    app = create_app(settings, gate,
                     namespace_guard_reviewer=namespace_gate(gate, review_namespace_guard))
    body = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": ns_request("UPDATE", namespace("team-a", {}),
                              namespace("team-a", {GUARD: "restricted"})),
    }
    reply = Client(app).post("/validate-namespace-guard", json=body)
    assert reply.status_code == 200
    assert reply.get_json()["response"]["allowed"] is False
    # The opt-in label's route is another gate: off here, a 404 naming it.
    assert Client(app).post("/validate-namespace", json=body).status_code == 404


# --- the name label's gate (/validate-namespace-name, issue 24) ------------------------------

NAME_LABEL = "kubernetes.io/metadata.name"


@pytest.mark.parametrize("operation", ["CREATE", "UPDATE"])
@pytest.mark.parametrize("forged", ["kube-system", "sidecar-debug", "", "team-b", "Team-A"])
def test_a_namespace_cannot_claim_another_name(operation: Operation, forged: str) -> None:
    """The attack of issue 24: `kubectl label ns team-a kubernetes.io/metadata.name=kube-system`
    by someone with only `patch` on the namespace; refused whoever asks, naming the fix."""
    old = namespace("team-a", {"debug": "enabled"}) if operation == "UPDATE" else None
    response = review_namespace_name(ns_request(
        operation, namespace("team-a", {"debug": "enabled", NAME_LABEL: forged}), old))["response"]
    assert response["allowed"] is False and response["status"]["code"] == 403
    message = response["status"]["message"]
    assert f"may not carry {NAME_LABEL}={forged!r}" in message
    assert f"kubectl label namespace team-a {NAME_LABEL}=team-a --overwrite" in message
    assert response["auditAnnotations"] == {"decision": "deny", "reason": "forged-name-label"}


def test_the_own_name_or_no_name_label_passes() -> None:
    for labels in ({NAME_LABEL: "team-a"}, {}, {"team": "kube-system"}):
        for operation in ("CREATE", "UPDATE"):
            request = ns_request(operation, namespace("team-a", labels),
                                 namespace("team-a", {NAME_LABEL: "kube-system"}))
            assert review_namespace_name(request)["response"]["allowed"] is True, labels
    # Removing a forged value (planted before the chart was installed) is the fix: it passes.
    assert review_namespace_name(ns_request(
        "UPDATE", namespace("team-a", {}), namespace("team-a", {NAME_LABEL: "kube-system"}))
    )["response"]["allowed"] is True
    # Keeping it, while changing anything else, does not.
    assert review_namespace_name(ns_request(
        "UPDATE", namespace("team-a", {NAME_LABEL: "kube-system", "team": "x"}),
        namespace("team-a", {NAME_LABEL: "kube-system"})))["response"]["allowed"] is False


def test_the_name_gate_reads_the_name_from_the_object_not_the_label() -> None:
    """The request's name and the object's name are the apiserver's; a label is not."""
    request = ns_request("CREATE", namespace("kube-system", {NAME_LABEL: "kube-system"}))
    request["name"] = "kube-system"
    assert review_namespace_name(request)["response"]["allowed"] is True
    bad = ns_request("UPDATE", {"apiVersion": "v1", "kind": "Namespace",
                                "metadata": {"name": "team-a", "labels": {NAME_LABEL: 7}}})
    response = review_namespace_name(bad)["response"]
    assert response["allowed"] is False and response["status"]["code"] == 400


def test_the_name_gate_through_the_http_route(settings: Settings) -> None:
    from werkzeug.test import Client

    from webhook.server.app import create_app

    app = create_app(settings, make_gate(settings, FakeCluster()))
    body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": ns_request("UPDATE", namespace("team-a", {NAME_LABEL: "kube-system"}),
                                  namespace("team-a", {}))}
    reply = Client(app).post("/validate-namespace-name", json=body)
    assert reply.status_code == 200
    assert reply.get_json()["response"]["allowed"] is False


def test_policy_rules_see_the_namespaces_name_not_a_forged_label(settings: Settings) -> None:
    """A rule selecting kubernetes.io/metadata.name means the namespace of that name, even
    where the apiserver (< 1.21) stores whatever value a namespace's editor wrote."""
    cluster = FakeCluster()
    cluster.labels["team-a"] = {NAME_LABEL: "platform-tools"}
    gate = make_gate(settings, cluster)
    assert gate.namespace_labels("team-a")[NAME_LABEL] == "team-a"
