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
from tests.unit.policy.test_policy import NOW as GATE_NOW
from tests.unit.policy.test_policy import FakeCluster, make_gate
from webhook.admission.guard import (
    FACT_SKEW,
    PodGuard,
    changed_owned_annotations,
    fact_problems,
    significant_update,
    stricter,
)
from webhook.admission.mutate import Mutator
from webhook.admission.review import Response, decode_patch
from webhook.config import Settings, load_settings
from webhook.inject.patch import apply_patch
from webhook.policy.api import PolicyRequest
from webhook.policy.engine import PolicyGate
from webhook.policy.guard_questions import GrantVerdict
from webhook.wire import constants
from webhook.wire.identity import UserInfo

NOW = dt.datetime(2026, 12, 3, 12, 0, 0, tzinfo=dt.UTC)
NAMESPACE = "shop"
OWNER = "system:serviceaccount:sidecar-debug:sidecar-debug-controller"
BOB: UserInfo = {"username": "bob", "groups": ["system:authenticated"]}
ALICE: UserInfo = {"username": "alice", "groups": ["system:authenticated"]}


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
    return PodGuard(settings, gate, clock=lambda: GATE_NOW, pods=Pods())


class Pods:
    """The pod store a 1.20 ephemeral-container review needs (the PodReader protocol)."""

    def __init__(self) -> None:
        self.pods: dict[tuple[str, str], dict[str, Any]] = {}

    def read_pod(self, namespace: str, name: str, timeout: float) -> dict[str, Any]:
        return copy.deepcopy(self.pods[(namespace, name)])


def app_pod(name: str = "web", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": {"app": name}},
        "spec": {"containers": [{"name": "app", "image": "registry.example.com/web:1"}],
                 **spec},
    }


def injected(settings: Settings, gate: PolicyGate, user: UserInfo,
             pod: dict[str, Any] | None = None) -> dict[str, Any]:
    """What the mutating webhook makes of the pod for this requester (the real pipeline)."""
    pod = pod or app_pod()
    review = admission_review(pod, NAMESPACE, username=user["username"],
                              groups=tuple(user["groups"]))
    answer = Mutator(settings, gate).review(review)
    assert answer["response"]["allowed"], answer
    return apply_patch(pod, decode_patch(answer))


def answer(guard: PodGuard, pod: dict[str, Any], user: UserInfo,
           operation: str = "CREATE", old: dict[str, Any] | None = None) -> Response:
    review = admission_review(pod, NAMESPACE, operation=operation, username=user["username"],
                              groups=tuple(user["groups"]))
    review["request"]["oldObject"] = old
    return guard.review(review)["response"]


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
    # Issue 24: for a container that does not exist (yet), and AppArmor's too.
    (lambda p: p["metadata"].update(annotations={
        "container.seccomp.security.alpha.kubernetes.io/later": "unconfined"}), "later"),
    (lambda p: p["metadata"].update(annotations={
        "container.apparmor.security.beta.kubernetes.io/later": "unconfined"}), "apparmor"),
    (lambda p: p["metadata"].update(annotations={"apparmor-ish/later": "x"}), None),
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
    body: object  # any JSON a client may send
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
        owner: UserInfo = {"username": OWNER, "groups": ["system:serviceaccounts"]}
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


# ------------------------------------------------------------------ with the core


def reason(response: Response) -> str:
    return str(response["auditAnnotations"][constants.AUDIT_REASON])


def test_what_the_injector_builds_passes_for_who_holds_it(
        settings: Settings, gate: PolicyGate, guard: PodGuard) -> None:
    for user, profile in ((BOB, "lttng"), (ALICE, "full")):
        pod = injected(settings, gate, user)
        sidecar = pod["spec"]["containers"][0]
        env = {e["name"]: e["value"] for e in sidecar["env"]}
        assert env[constants.ENV_PROFILE] == profile
        response = answer(guard, pod, user)
        assert response["allowed"] is True, response


def test_a_granted_toolset_brought_by_someone_without_the_grant_is_refused(
        settings: Settings, gate: PolicyGate, guard: PodGuard) -> None:
    """alice's injected pod, created again by bob (a copy of its manifest): the toolset is
    ours and verified, but bob holds no grant: Pod Security applies, and the refusal names the
    rolebinding."""
    pod = injected(settings, gate, ALICE)
    response = answer(guard, pod, BOB)
    assert response["allowed"] is False
    message = response["status"]["message"]
    assert 'violates PodSecurity "baseline:latest (v1.37)"' in message and "privileged" in message
    assert "To grant it: kubectl create rolebinding sidecar-debug-full-" in message
    assert reason(response) == "toolset-not-granted"


def test_privileged_and_host_pods_are_refused(guard: PodGuard) -> None:
    privileged = app_pod()
    privileged["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    host = app_pod(hostPID=True, volumes=[{"name": "root", "hostPath": {"path": "/"}}])
    for pod, word in ((privileged, "privileged"), (host, "host namespaces")):
        response = answer(guard, pod, BOB)
        assert response["allowed"] is False and word in response["status"]["message"]
        assert response["status"]["code"] == 403 and reason(response) == "pod-security"


def test_the_toolset_image_is_reserved(settings: Settings, guard: PodGuard) -> None:
    repository = settings.toolset_image.rsplit(":", 1)[0]
    for image in (settings.toolset_image, f"{repository}@sha256:{'a' * 64}", f"{repository}:x"):
        pod = app_pod()
        pod["spec"]["containers"].append({"name": "tools", "image": image,
                                          "command": ["sh", "-c", "sleep 1d"]})
        response = answer(guard, pod, ALICE)
        assert response["allowed"] is False, image
        assert reason(response) == "toolset"


def test_a_forged_status_and_toolset_are_refused(settings: Settings, gate: PolicyGate,
                                                 guard: PodGuard) -> None:
    """Issue 17's second case: a hand-written privileged `debug-toolset` with hostPath / and
    a status claiming platform-admin's grant."""
    pod = injected(settings, gate, ALICE)
    pod["metadata"]["annotations"][constants.ANNOTATION_STATUS] = json.dumps(
        {"profile": "full", "grant": "user:platform-admin", "container": "debug-toolset"})
    pod["spec"]["volumes"].append({"name": "root", "hostPath": {"path": "/"}})
    pod["spec"]["containers"][0]["volumeMounts"].append({"name": "root", "mountPath": "/host"})
    response = answer(guard, pod, BOB)
    assert response["allowed"] is False
    assert "hostPath" in response["status"]["message"]


def test_forged_session_facts_are_refused(settings: Settings, gate: PolicyGate,
                                          guard: PodGuard) -> None:
    pod = injected(settings, gate, ALICE)
    for item in pod["spec"]["containers"][0]["env"]:
        if item["name"] == constants.ENV_GRANT:
            item["value"] = "user:platform-admin"
    response = answer(guard, pod, ALICE)
    assert response["allowed"] is False and reason(response) == "session-facts"
    assert "user:platform-admin" in response["status"]["message"]


def test_a_pod_injected_offline_gets_its_facts_and_passes(
        settings: Settings, gate: PolicyGate, guard: PodGuard) -> None:
    """Created already injected (offline inject): the mutating webhook writes the facts for a
    requester who holds the profile; the guard then admits it. Without the grant: refused."""
    from webhook.inject.workloads import inject_document

    offline = inject_document(app_pod(), settings)
    assert constants.ENV_SESSION_STARTED not in json.dumps(offline)
    assert answer(guard, injected(settings, gate, ALICE, offline), ALICE)["allowed"] is True
    unfacted = answer(guard, injected(settings, gate, BOB, offline), BOB)
    assert unfacted["allowed"] is False


def test_an_update_is_refused_only_for_what_it_adds(
        settings: Settings, gate: PolicyGate, guard: PodGuard) -> None:
    pod = injected(settings, gate, ALICE)
    new_image = copy.deepcopy(pod)
    new_image["spec"]["containers"][1]["image"] = "registry.example.com/web:2"
    assert answer(guard, new_image, BOB, "UPDATE", pod)["allowed"] is True
    to_toolset = copy.deepcopy(pod)
    to_toolset["spec"]["containers"][1]["image"] = settings.toolset_image
    response = answer(guard, to_toolset, BOB, "UPDATE", pod)
    assert response["allowed"] is False and "with what the update adds" in (
        response["status"]["message"])


def ephemeral_review(pod: dict[str, Any], container: dict[str, Any], user: UserInfo,
                     legacy: bool) -> dict[str, Any]:
    """A pods/ephemeralcontainers UPDATE as 1.20 (EphemeralContainers) or 1.22+ (Pod) sends it."""
    old = copy.deepcopy(pod)
    if legacy:
        meta = {"name": pod["metadata"]["name"], "namespace": NAMESPACE}
        old = {"kind": "EphemeralContainers", "apiVersion": "v1", "metadata": meta,
               "ephemeralContainers": []}
        new = {**old, "ephemeralContainers": [container]}
    else:
        new = copy.deepcopy(pod)
        new["spec"]["ephemeralContainers"] = [container]
    review = admission_review(new, NAMESPACE, operation="UPDATE", username=user["username"],
                              groups=tuple(user["groups"]))
    review["request"]["oldObject"] = old
    review["request"]["subResource"] = "ephemeralcontainers"
    review["request"]["name"] = pod["metadata"]["name"]
    if legacy:
        review["request"]["kind"] = {"group": "", "version": "v1", "kind": "EphemeralContainers"}
    return review


@pytest.mark.parametrize("legacy", [True, False], ids=["1.20", "1.22+"])
def test_ephemeral_containers(settings: Settings, gate: PolicyGate, guard: PodGuard,
                              legacy: bool) -> None:
    from webhook.inject.attach import build_attach_container

    pod = injected(settings, gate, ALICE)
    assert isinstance(guard.pods, Pods)
    guard.pods.pods[(NAMESPACE, "web")] = pod
    sysadmin: dict[str, Any] = {"name": "sysadmin", "image": settings.toolset_image,
                                "command": ["sh"]}
    if not legacy:  # Kubernetes >= 1.23: kubectl debug --profile=sysadmin
        sysadmin = {"name": "sysadmin", "image": "busybox", "securityContext": {
            "privileged": True}}
    refused = guard.review(ephemeral_review(pod, sysadmin, BOB, legacy))["response"]
    assert refused["allowed"] is False, refused
    # What `attach` builds, with the facts the ephemeral gate writes: passes for alice.
    attach = build_attach_container(pod, settings, settings.profiles["full"],
                                    name="debug-toolset-abc123", target="app",
                                    with_security_context=not legacy)
    review = ephemeral_review(pod, attach, ALICE, legacy)
    mutated = Mutator(settings, gate, pods=guard.pods).review(copy.deepcopy(review))
    assert mutated["response"]["allowed"], mutated
    patched = apply_patch(review["request"]["object"], decode_patch(mutated))
    review["request"]["object"] = patched
    assert guard.review(review)["response"]["allowed"] is True
    # bob attaching the same is refused (by the mutating gate, and by the guard).
    bob = ephemeral_review(pod, attach, BOB, legacy)
    bob["request"]["object"] = patched
    response = guard.review(bob)["response"]
    assert response["allowed"] is False


def test_a_recorded_update_from_the_apiserver(guard: PodGuard) -> None:
    """tests/fixtures/admission/pod-update.json: `kubectl annotate` of the status annotation as
    Kubernetes 1.20 sends it to a validating webhook (object and oldObject)."""
    fixture = Path(__file__).resolve().parents[2] / "fixtures" / "admission" / "pod-update.json"
    review = json.loads(fixture.read_text())
    assert review["request"]["oldObject"] is not None
    response = guard.review(review)["response"]
    assert response["uid"] == review["request"]["uid"]
    assert response["allowed"] is False and reason(response) == "owned-annotation"
    assert "admin may not add, change or remove it" in response["status"]["message"]


def test_a_policy_rule_or_the_namespace_label_makes_the_level_restricted(
        settings: Settings, cluster: FakeCluster, tmp_path: Path) -> None:
    """baseline lets a root container run; restricted does not (runAsNonRoot)."""
    root = app_pod()
    plain = PodGuard(settings, make_gate(settings, cluster), clock=lambda: GATE_NOW)
    assert answer(plain, root, BOB)["allowed"] is True
    policy = ("apiVersion: sidecar-debug.io/v1alpha1\nkind: DebugPolicy\nspec:\n  rules:\n"
              f"    - name: strict\n      match: {{namespaces: [{NAMESPACE}]}}\n"
              "      guardLevel: restricted\n")
    strict = PodGuard(settings, make_gate(settings, cluster, policy, tmp_path),
                      clock=lambda: GATE_NOW)
    response = answer(strict, root, BOB)
    assert response["allowed"] is False
    assert 'violates PodSecurity "restricted:latest (v1.37)"' in response["status"]["message"]
    cluster.labels[NAMESPACE][constants.LABEL_GUARD] = "restricted"
    labelled = PodGuard(settings, make_gate(settings, cluster), clock=lambda: GATE_NOW)
    assert answer(labelled, root, BOB)["allowed"] is False
    cluster.labels[NAMESPACE][constants.LABEL_GUARD] = "privileged"  # never looser
    privileged = app_pod()
    privileged["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    loose = PodGuard(settings, make_gate(settings, cluster), clock=lambda: GATE_NOW)
    assert answer(loose, privileged, BOB)["allowed"] is False


# ------------------------------------------------------------------ issue 24: owned everywhere

SECCOMP_LATER = "container.seccomp.security.alpha.kubernetes.io/later"
APPARMOR_LATER = "container.apparmor.security.beta.kubernetes.io/later"


def status_review(pod: dict[str, Any], old: dict[str, Any], user: UserInfo
                  ) -> dict[str, Any]:
    """A pods/status UPDATE (`kubectl replace --raw .../status`, the kubelet's status patch):
    the apiserver keeps the spec, the metadata goes through."""
    review = admission_review(pod, NAMESPACE, operation="UPDATE", username=user["username"],
                              groups=tuple(user["groups"]))
    review["request"]["oldObject"] = old
    review["request"]["subResource"] = "status"
    review["request"]["name"] = pod["metadata"]["name"]
    return review


def test_pods_status_cannot_change_the_owned_annotations(
        settings: Settings, gate: PolicyGate, guard: PodGuard) -> None:
    pod = injected(settings, gate, ALICE)
    for key, value in ((constants.ANNOTATION_STATUS, json.dumps({"mode": "standby"})),
                       (constants.ANNOTATION_STATUS, None),
                       (constants.ANNOTATION_OVERDUE_AFTER, "2999-01-01T00:00:00Z")):
        new = copy.deepcopy(pod)
        if value is None:
            new["metadata"]["annotations"].pop(key)
        else:
            new["metadata"]["annotations"][key] = value
        refused = guard.review(status_review(new, pod, BOB))["response"]
        assert refused["allowed"] is False and reason(refused) == "owned-annotation", refused
        assert key in refused["status"]["message"]
        owner: UserInfo = {"username": OWNER, "groups": ["system:serviceaccounts"]}
        assert guard.review(status_review(new, pod, owner))["response"]["allowed"] is True
    # What the kubelet writes there passes: conditions, phase, and other annotations.
    kubelet: UserInfo = {"username": "system:node:n1", "groups": ["system:nodes"]}
    new = copy.deepcopy(pod)
    new["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    new["metadata"]["annotations"]["team"] = "shop"
    answered = guard.review(status_review(new, pod, kubelet))["response"]
    assert answered["allowed"] is True and reason(answered) == "insignificant-update"
    # Other subresources still pass unreviewed; DELETE-like operations too.
    other = status_review(new, pod, BOB)
    other["request"]["subResource"] = "binding"
    assert guard.review(other)["response"]["allowed"] is True


@pytest.mark.parametrize("via", ["pods", "pods/status"])
@pytest.mark.parametrize(("key", "value"), [(SECCOMP_LATER, "unconfined"),
                                            (APPARMOR_LATER, "unconfined")])
def test_a_security_annotation_for_a_later_container_is_judged_as_at_create(
        guard: PodGuard, via: str, key: str, value: str) -> None:
    pod = app_pod()
    planted = copy.deepcopy(pod)
    planted["metadata"]["annotations"] = {key: value}
    # At create it is refused...
    assert answer(guard, planted, BOB)["allowed"] is False
    # ...and so is an update that adds it, by either route.
    review = (status_review(planted, pod, BOB) if via == "pods/status" else
              admission_review(planted, NAMESPACE, operation="UPDATE", username="bob",
                               groups=("system:authenticated",)))
    review["request"]["oldObject"] = pod
    refused = guard.review(review)["response"]
    assert refused["allowed"] is False, refused
    assert key in refused["status"]["message"]
    # A safe value is an ordinary update.
    harmless = copy.deepcopy(pod)
    harmless["metadata"]["annotations"] = {key: "runtime/default"}
    assert answer(guard, harmless, BOB, "UPDATE", pod)["allowed"] is True


@pytest.mark.parametrize("legacy", [True, False], ids=["1.20", "1.22+"])
@pytest.mark.parametrize("key", [SECCOMP_LATER, APPARMOR_LATER])
def test_an_ephemeral_container_cannot_ride_on_an_annotation_planted_before(
        guard: PodGuard, legacy: bool, key: str) -> None:
    """A pod stored with the annotation before the guard existed (or past it): the ephemeral
    container that takes the name gets the annotation's profile, so adding it is refused."""
    pod = app_pod()
    pod["metadata"]["annotations"] = {key: "unconfined"}
    assert isinstance(guard.pods, Pods)
    guard.pods.pods[(NAMESPACE, "web")] = pod
    later = {"name": "later", "image": "busybox", "command": ["sh"]}
    response = guard.review(ephemeral_review(pod, later, BOB, legacy))["response"]
    assert response["allowed"] is False, response
    assert key in response["status"]["message"]
    # Under another name the annotation is not the new container's: the update passes.
    other = {"name": "other", "image": "busybox", "command": ["sh"]}
    assert guard.review(ephemeral_review(pod, other, BOB, legacy))["response"]["allowed"]


def test_the_namespace_enforce_version_label_chooses_the_checks(
        settings: Settings, cluster: FakeCluster, caplog: pytest.LogCaptureFixture) -> None:
    """Issue 26 item 5: pod-security.kubernetes.io/enforce-version, read from the namespace as
    the level is. Kubernetes 1.37 made these sysctls safe: a namespace pinned to v1.36 refuses
    them and says which version it applied; an invalid value is read as latest (as Pod
    Security admission does) and the answer says so."""
    pod = app_pod(securityContext={"sysctls": [
        {"name": "net.ipv4.tcp_slow_start_after_idle", "value": "0"}]})

    def review(version: str | None) -> Response:
        labels = cluster.labels[NAMESPACE]
        labels.pop(constants.LABEL_POD_SECURITY_ENFORCE_VERSION, None)
        if version is not None:
            labels[constants.LABEL_POD_SECURITY_ENFORCE_VERSION] = version
        guard = PodGuard(settings, make_gate(settings, cluster), clock=lambda: GATE_NOW)
        return answer(guard, pod, BOB)

    assert review(None)["allowed"] is True
    assert review("latest")["allowed"] is True
    assert review("v1.37")["allowed"] is True
    pinned = review("v1.36")
    assert pinned["allowed"] is False
    assert ('violates PodSecurity "baseline:v1.36": forbidden sysctls '
            "(net.ipv4.tcp_slow_start_after_idle)") in pinned["status"]["message"]
    invalid = review("1.36")
    assert invalid["allowed"] is True
    assert ("namespace 'shop': label pod-security.kubernetes.io/enforce-version is invalid: "
            "'1.36' is not a Pod Security version") in caplog.text
    assert invalid["warnings"] == [
        "The namespace label pod-security.kubernetes.io/enforce-version is invalid: '1.36' is "
        "not a Pod Security version: use 'latest' or v1.N (e.g. v1.30); read as latest, as Pod "
        "Security does (set it to latest or v1.N)."]
    pod["spec"]["hostNetwork"] = True
    refused = review("v1.x")["status"]["message"]
    assert 'violates PodSecurity "baseline:latest (v1.37)": host namespaces' in refused
    assert "enforce-version is invalid: 'v1.x' is not a Pod Security version" in refused
