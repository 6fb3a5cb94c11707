"""The guard (/validate-pods, issue 17) in process: what the injector and `attach` build passes,
everything else in a guarded namespace is held to Pod Security, our annotations are ours, and
nothing a pod creator writes (status, names, env) is trusted.

The policy gate is the real one over a FakeCluster (tests/unit/policy/test_policy.py); the pods
come from the real injection pipeline. The real apiserver's view: tests/e2e/test_guard_e2e.py.
"""

from __future__ import annotations

import copy
import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest

from tests.unit.core_helpers import admission_review
from tests.unit.policy.test_policy import FakeCluster, make_gate
from webhook import constants
from webhook.admission.guard import (
    FACT_SKEW,
    PodGuard,
    changed_owned_annotations,
    fact_problems,
    significant_update,
    stricter,
)
from webhook.admission.mutate import Mutator
from webhook.admission.review import decode_patch
from webhook.config import Settings, load_settings
from webhook.inject.patch import apply_patch
from webhook.policy.api import PolicyRequest
from webhook.policy.gate import GrantVerdict, PolicyGate

NOW = dt.datetime(2026, 12, 3, 12, 0, 0, tzinfo=dt.UTC)
NAMESPACE = "shop"
OWNER = "system:serviceaccount:sidecar-debug:sidecar-debug-controller"
BOB = {"username": "bob", "groups": ["system:authenticated"]}
ALICE = {"username": "alice", "groups": ["system:authenticated"]}


@pytest.fixture
def settings() -> Settings:
    return load_settings(environ={}, overrides={"annotation_owners": [OWNER]})


@pytest.fixture
def cluster() -> FakeCluster:
    fake = FakeCluster()
    fake.labels[NAMESPACE] = {"debug": "enabled"}
    fake.grants.add(("alice", "full", NAMESPACE))
    return fake


@pytest.fixture
def gate(settings: Settings, cluster: FakeCluster) -> PolicyGate:
    return make_gate(settings, cluster)


@pytest.fixture
def guard(settings: Settings, gate: PolicyGate) -> PodGuard:
    return PodGuard(settings, gate, clock=lambda: NOW)


def app_pod(name: str = "web", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": {"app": name}},
        "spec": {"containers": [{"name": "app", "image": "registry.example.com/web:1"}],
                 **spec},
    }


def injected(settings: Settings, gate: PolicyGate, user: dict[str, Any],
             pod: dict[str, Any] | None = None) -> dict[str, Any]:
    """What the mutating webhook makes of the pod for this requester (the real pipeline)."""
    pod = pod or app_pod()
    review = admission_review(pod, NAMESPACE, username=user["username"],
                              groups=tuple(user["groups"]))
    answer = Mutator(settings, gate).review(review)
    assert answer["response"]["allowed"], answer
    return apply_patch(pod, decode_patch(answer))


def answer(guard: PodGuard, pod: dict[str, Any], user: dict[str, Any],
           operation: str = "CREATE", old: dict[str, Any] | None = None) -> dict[str, Any]:
    review = admission_review(pod, NAMESPACE, operation=operation, username=user["username"],
                              groups=tuple(user["groups"]))
    review["request"]["oldObject"] = old
    response: dict[str, Any] = guard.review(review)["response"]
    return response


# ------------------------------------------------------------------ pure helpers


def test_the_strictest_level_wins() -> None:
    assert stricter("baseline", None) == "baseline"
    assert stricter("baseline", "restricted") == "restricted"
    assert stricter("restricted", "baseline") == "restricted"
    assert stricter("baseline", "privileged") == "baseline"  # a label cannot loosen it


def test_owned_annotations_changed() -> None:
    old = app_pod()
    old["metadata"]["annotations"] = {constants.ANNOTATION_STATUS: "{}", "team": "a"}
    new = copy.deepcopy(old)
    new["metadata"]["annotations"]["team"] = "b"
    assert changed_owned_annotations(old, new) == []
    del new["metadata"]["annotations"][constants.ANNOTATION_STATUS]
    assert changed_owned_annotations(old, new) == [constants.ANNOTATION_STATUS]
    new["metadata"]["annotations"][constants.ANNOTATION_OVERDUE_AFTER] = "2999-01-01T00:00:00Z"
    assert changed_owned_annotations(old, new) == [
        constants.ANNOTATION_STATUS, constants.ANNOTATION_OVERDUE_AFTER]


@pytest.mark.parametrize(("change", "what"), [
    (lambda p: p["metadata"].setdefault("labels", {}).update(x="y"), None),
    (lambda p: p["spec"]["containers"][0].update(image="evil:1"), "the image"),
    (lambda p: p["spec"].update(ephemeralContainers=[{"name": "dbg", "image": "x"}]),
     "ephemeralContainers 'dbg' added"),
    (lambda p: p["metadata"].update(annotations={
        "seccomp.security.alpha.kubernetes.io/pod": "unconfined"}), "seccomp"),
    (lambda p: p["metadata"].update(annotations={
        "container.seccomp.security.alpha.kubernetes.io/app": "unconfined"}), "seccomp"),
])
def test_significant_updates_are_those_that_change_what_runs(change: Any, what: str | None
                                                            ) -> None:
    old = app_pod()
    new = copy.deepcopy(old)
    change(new)
    found = significant_update(old, new)
    assert (found is None) if what is None else (what in str(found))


def verdict(grant: str = "user:alice", max_session: dt.timedelta | None = None) -> GrantVerdict:
    return GrantVerdict(True, grant, "granted-user", "granted", max_session)


def toolset_env(**values: str) -> dict[str, Any]:
    names = {"grant": constants.ENV_GRANT, "started": constants.ENV_SESSION_STARTED,
             "deadline": constants.ENV_SESSION_DEADLINE}
    return {"env": [{"name": names[k], "value": v} for k, v in values.items()]}


def test_session_facts_as_the_webhook_writes_them_pass() -> None:
    container = toolset_env(grant="user:alice", started="2026-12-03T12:00:00Z",
                            deadline="2026-12-03T14:00:00Z")
    assert fact_problems(container, verdict(max_session=dt.timedelta(hours=2)), NOW) == []


@pytest.mark.parametrize(("facts", "problem"), [
    ({"grant": "user:platform-admin", "started": "2026-12-03T12:00:00Z"}, "re-derived"),
    ({"grant": "user:alice"}, "not an RFC 3339 time"),
    ({"grant": "user:alice", "started": "2027-01-01T00:00:00Z"}, "is not now"),
    ({"grant": "user:alice", "started": "2026-12-03T12:00:00Z"}, "must name the deadline"),
    ({"grant": "user:alice", "started": "2026-12-03T12:00:00Z",
      "deadline": "2999-01-01T00:00:00Z"}, "later than the policy's maxSessionDuration"),
])
def test_forged_session_facts_are_named(facts: dict[str, str], problem: str) -> None:
    found = fact_problems(toolset_env(**facts), verdict(max_session=dt.timedelta(hours=2)), NOW)
    assert any(problem in text for text in found), found


def test_a_start_within_the_skew_passes() -> None:
    started = (NOW - FACT_SKEW + dt.timedelta(seconds=5)).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert fact_problems(toolset_env(grant="user:alice", started=started), verdict(), NOW) == []


# ------------------------------------------------------------------ the grant, re-derived


def test_check_grant_re_derives_by_the_gate_without_the_mode(
        settings: Settings, gate: PolicyGate, cluster: FakeCluster) -> None:
    full = settings.profiles["full"]
    held = gate.check_grant(PolicyRequest(NAMESPACE, "default", ALICE, full, None))
    assert (held.granted, held.grant) == (True, "user:alice")
    refused = gate.check_grant(PolicyRequest(NAMESPACE, "default", BOB, full, None))
    assert not refused.granted and refused.grant == "none"
    assert "kubectl create rolebinding" in refused.message  # what would grant it
    unprivileged = gate.check_grant(PolicyRequest(NAMESPACE, "default", BOB,
                                                  settings.profiles["lttng"], None))
    assert (unprivileged.granted, unprivileged.grant) == (True, "unprivileged")
    other_image = gate.check_grant(PolicyRequest(NAMESPACE, "default", ALICE, full, "evil:1"))
    assert not other_image.granted and other_image.reason == "image-not-allowed"
    calls = len(cluster.calls)
    gate.check_grant(PolicyRequest(NAMESPACE, "default", ALICE, full, None))
    assert len(cluster.calls) == calls  # the gate's cache


def test_an_ephemeral_toolset_needs_the_requesters_own_grant(
        settings: Settings, gate: PolicyGate, cluster: FakeCluster) -> None:
    cluster.grant_sa(NAMESPACE, "default", "full")
    full = settings.profiles["full"]
    assert gate.check_grant(PolicyRequest(NAMESPACE, "default", BOB, full, None)).granted
    ephemeral = PolicyRequest(NAMESPACE, "default", BOB, full, None,
                              ephemeral_container="debug-toolset-abc123")
    assert not gate.check_grant(ephemeral).granted


# ------------------------------------------------------------------ reviews


def test_bad_input_is_a_400_never_an_error(guard: PodGuard, tmp_path: Path) -> None:
    for body in (None, [], {"kind": "AdmissionReview"}, {"kind": "AdmissionReview",
                 "apiVersion": "admission.k8s.io/v1", "request": {"uid": 5}}):
        response = guard.review(body)["response"]
        assert response["allowed"] is False and response["status"]["code"] == 400, body
    review = admission_review(app_pod(), NAMESPACE)
    review["request"]["object"]["spec"]["containers"] = "app"
    response = guard.review(review)["response"]
    assert response["status"]["code"] == 400
    assert "spec.containers" in response["status"]["message"]


def test_annotations_of_the_webhook_change_only_by_their_owners(
        settings: Settings, gate: PolicyGate, guard: PodGuard) -> None:
    pod = injected(settings, gate, BOB)
    for change in ({constants.ANNOTATION_STATUS: None},
                   {constants.ANNOTATION_STATUS: json.dumps({"mode": "standby"})},
                   {constants.ANNOTATION_OVERDUE_AFTER: "2999-01-01T00:00:00Z"}):
        new = copy.deepcopy(pod)
        for key, value in change.items():
            if value is None:
                new["metadata"]["annotations"].pop(key)
            else:
                new["metadata"]["annotations"][key] = value
        refused = answer(guard, new, BOB, "UPDATE", pod)
        assert refused["allowed"] is False
        assert "written by sidecar-debug's webhook and controller only" in (
            refused["status"]["message"])
        owner = {"username": OWNER, "groups": ["system:serviceaccounts"]}
        assert answer(guard, new, owner, "UPDATE", pod)["allowed"] is True
    relabelled = copy.deepcopy(pod)
    relabelled["metadata"]["labels"]["team"] = "shop"
    assert answer(guard, relabelled, BOB, "UPDATE", pod)["allowed"] is True


def test_exempt_usernames_and_namespaces_pass(settings: Settings, gate: PolicyGate) -> None:
    exempt = load_settings(environ={}, overrides={
        "guard_exempt_usernames": ["ci"], "guard_exempt_namespaces": [NAMESPACE]})
    pod = app_pod()
    pod["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    response = answer(PodGuard(exempt, gate, clock=lambda: NOW), pod, BOB)
    assert response["allowed"] is True
    assert response["auditAnnotations"][constants.AUDIT_REASON] == "exempt-namespace"
