"""Ephemeral containers (pods/ephemeralcontainers UPDATE) through the same gate as injection:
the real 1.20 review (EphemeralContainers object), and 1.23+ reviews (the Pod, where a
securityContext is allowed and `kubectl debug --profile=sysadmin` asks for privileged)."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.unit.core_helpers import review_around
from tests.unit.policy.test_policy import ALICE, FakeCluster, make_gate, policy_text
from webhook.admission.mutate import Mutator
from webhook.admission.review import decode_patch
from webhook.config import Settings, load_settings
from webhook.inject.patch import apply_patch
from webhook.kube.access import ClusterAPIError
from webhook.wire import constants

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "admission"
FIXTURE = FIXTURES / "ephemeral-containers.json"
TOOLSET = "localhost/sidecar-debug/toolset:0.1.0"


@pytest.fixture
def settings() -> Settings:
    return load_settings(environ={"SIDECAR_DEBUG_TOOLSET_IMAGE": TOOLSET})


class FakePods:
    """PodReader: the pod behind a 1.20 review (its volumes and service account)."""

    def __init__(self, pod: dict[str, Any] | None = None, fail: bool = False) -> None:
        self.pod, self.fail, self.reads = pod, fail, 0

    def read_pod(self, namespace: str, name: str, timeout: float) -> dict[str, Any]:
        self.reads += 1
        if self.fail or self.pod is None:
            raise ClusterAPIError(f"GET pods/{name}: HTTP 403: forbidden")
        return self.pod


def running_pod(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "ephemeral-pod", "namespace": "fixtures", "labels": {"app": "x"}},
        "spec": {
            "serviceAccountName": "app",
            "containers": [
                {"name": "app", "image": "app:1",
                 "volumeMounts": [{"name": "scratch", "mountPath": "/tmp"}]}
            ],
            "volumes": [{"name": "scratch", "emptyDir": {}}],
            **spec,
        },
    }


def legacy_review() -> dict[str, Any]:
    """The review the real 1.20 apiserver sent when alice added our toolset (profile perf)."""
    review: dict[str, Any] = json.loads(FIXTURE.read_text())
    return review


def pod_review(
    *new: dict[str, Any], old: list[dict[str, Any]] | None = None,
    user: dict[str, Any] | None = None, pod: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A 1.23+ review: object and oldObject are the Pod."""
    before = copy.deepcopy(pod or running_pod())
    before["spec"]["ephemeralContainers"] = list(old or [])
    after = copy.deepcopy(before)
    after["spec"]["ephemeralContainers"] = [*(old or []), *new]
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "u-eph",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "subResource": "ephemeralcontainers",
            "name": "ephemeral-pod",
            "namespace": "fixtures",
            "operation": "UPDATE",
            "userInfo": user or dict(ALICE),
            "object": after,
            "oldObject": before,
        },
    }


def toolset(profile: str | None, **extra: Any) -> dict[str, Any]:
    env = [{"name": constants.ENV_ATTACHED, "value": "true"}]
    if profile:
        env.append({"name": constants.ENV_PROFILE, "value": profile})
    return {"name": "debug-toolset-abc123", "image": TOOLSET, "command": ["toolset-entrypoint"],
            "targetContainerName": "app", "env": env, **extra}


SYSADMIN = {"name": "debugger-x", "image": "busybox", "securityContext": {"privileged": True}}


def answer(
    settings: Settings, cluster: FakeCluster, body: dict[str, Any],
    pods: FakePods | None = None, policy: str | None = None, tmp_path: Path | None = None,
) -> dict[str, Any]:
    gate = make_gate(settings, cluster, policy, tmp_path)
    response: dict[str, Any] = dict(Mutator(settings, gate, pods=pods).review(body)["response"])
    assert response["uid"] == body["request"]["uid"]
    return response


def grant_user(cluster: FakeCluster, user: str, profile: str, namespace: str = "fixtures") -> None:
    cluster.grants.add((user, profile, namespace))


def rolebinding(message: str) -> str:
    found = re.search(r"kubectl create rolebinding \S+ --clusterrole=\S+ --\S+ -n \S+", message)
    assert found, message
    return found.group(0)


# --- the real 1.20 review -----------------------------------------------------------------------


def test_real_1_20_attach_with_a_privileged_profile_needs_the_requesters_grant(
    settings: Settings,
) -> None:
    cluster = FakeCluster()
    # The pod's service account holds the grant: that does not count for an ephemeral container.
    cluster.grant_sa("fixtures", "app", "perf")
    pods = FakePods(running_pod())
    response = answer(settings, cluster, legacy_review(), pods)
    assert response["allowed"] is False
    assert response["status"]["code"] == 403
    message = response["status"]["message"]
    assert "debug-toolset-abc123" in message and "'perf'" in message
    assert rolebinding(message) == (
        "kubectl create rolebinding sidecar-debug-perf-alice "
        "--clusterrole=sidecar-debug-profile-perf --user=alice -n fixtures"
    )
    assert response["auditAnnotations"] == {
        "decision": "denied", "reason": "no-rbac-grant", "profile": "perf"}
    assert [c.user for c in cluster.calls] == ["alice"]  # the requester, never the service account
    assert pods.reads == 1  # volumes and service account come from the pod on 1.20


def test_real_1_20_attach_granted_to_the_user_is_admitted_and_marked(settings: Settings) -> None:
    cluster = FakeCluster()
    grant_user(cluster, "alice", "perf")
    body = legacy_review()
    response = answer(settings, cluster, body, FakePods(running_pod()))
    assert response["allowed"] is True
    assert response["auditAnnotations"] == {
        "decision": "attached", "reason": "granted-user", "profile": "perf", "grant": "user:alice"}
    patched = apply_patch(body["request"]["object"], decode_patch(review_around(response)))
    env = patched["ephemeralContainers"][0]["env"]
    assert {"name": constants.ENV_GRANT, "value": "user:alice"} in env
    assert patched["kind"] == "EphemeralContainers"  # the patch fits the 1.20 object


def test_real_1_20_review_fails_closed_when_the_pod_cannot_be_read(settings: Settings) -> None:
    cluster = FakeCluster()
    grant_user(cluster, "alice", "perf")
    response = answer(settings, cluster, legacy_review(), FakePods(fail=True))
    assert response["allowed"] is False
    assert "needs `get` on pods" in response["status"]["message"]
    assert response["auditAnnotations"]["reason"] == "pod-lookup-failed"


def test_real_1_20_plain_attach_of_the_default_unprivileged_profile_passes(
    settings: Settings,
) -> None:
    body = legacy_review()
    env = body["request"]["object"]["ephemeralContainers"][0]["env"]
    env[1]["value"] = "lttng"
    cluster = FakeCluster()
    response = answer(settings, cluster, body, FakePods(running_pod()))
    assert response["allowed"] is True
    assert response["auditAnnotations"]["decision"] == "attached"
    assert response["auditAnnotations"]["grant"] == "unprivileged"
    assert cluster.calls == []  # no grant needed, no SubjectAccessReview


def test_hostpath_mount_on_1_20_is_a_privilege(settings: Settings) -> None:
    """On 1.20 a mount is the only privilege an ephemeral container can express: mounting the
    pod's hostPath volume (an injected pod's /lib/modules) read-write needs the grant."""
    body = legacy_review()
    container = body["request"]["object"]["ephemeralContainers"][0]
    container["env"] = []  # not our toolset: `kubectl debug` with a mount
    container["volumeMounts"] = [{"name": "modules", "mountPath": "/lib/modules"}]
    pod = running_pod(volumes=[{"name": "modules", "hostPath": {"path": "/lib/modules"}}])
    response = answer(settings, FakeCluster(), body, FakePods(pod))
    assert response["allowed"] is False
    assert "hostPath /lib/modules" in response["status"]["message"]
    assert "--clusterrole=sidecar-debug-profile-bcc" in response["status"]["message"]


# --- 1.23+ reviews: the Pod ---------------------------------------------------------------------


def test_kubectl_debug_sysadmin_is_denied_without_the_grant_of_the_covering_profile(
    settings: Settings,
) -> None:
    cluster = FakeCluster()
    response = answer(settings, cluster, pod_review(SYSADMIN))
    assert response["allowed"] is False
    message = response["status"]["message"]
    assert "'debugger-x'" in message and "privileged container" in message
    assert rolebinding(message) == (
        "kubectl create rolebinding sidecar-debug-full-alice "
        "--clusterrole=sidecar-debug-profile-full --user=alice -n fixtures"
    )
    grant_user(cluster, "alice", "full")
    response = answer(settings, cluster, pod_review(SYSADMIN))
    assert response["allowed"] is True
    assert "patch" not in response  # not ours: admitted as it is
    assert response["auditAnnotations"]["grant"] == "user:alice"


def test_capabilities_map_to_the_least_privileged_profile_that_covers_them(
    settings: Settings,
) -> None:
    tracer: dict[str, Any] = {
        "name": "tracer", "image": "x",
        "securityContext": {"capabilities": {"add": ["SYS_PTRACE", "PERFMON"]}}}
    response = answer(settings, FakeCluster(), pod_review(tracer))
    assert "--clusterrole=sidecar-debug-profile-perf" in response["status"]["message"]
    # Compared as written, as Pod Security and the guard do: only a privileged grant covers
    # `CAP_PERFMON` (the runtime may read it as PERFMON; no profile grants it so spelled).
    tracer["securityContext"]["capabilities"]["add"] = ["SYS_PTRACE", "CAP_PERFMON"]
    response = answer(settings, FakeCluster(), pod_review(tracer))
    assert "--clusterrole=sidecar-debug-profile-full" in response["status"]["message"]
    ebpf = {"name": "ebpf", "image": "x", "securityContext": {"capabilities": {"add": ["BPF"]}}}
    response = answer(settings, FakeCluster(), pod_review(ebpf))
    assert "--clusterrole=sidecar-debug-profile-bcc" in response["status"]["message"]


def test_privileged_toolset_profile_by_a_user_without_the_grant(settings: Settings) -> None:
    container = toolset("full", securityContext={"privileged": True})
    response = answer(settings, FakeCluster(), pod_review(container))
    assert response["allowed"] is False
    assert "'full'" in response["status"]["message"]
    assert response["auditAnnotations"]["profile"] == "full"


def test_a_container_asking_more_than_its_profile_is_denied(settings: Settings) -> None:
    cluster = FakeCluster()
    grant_user(cluster, "alice", "perf")
    container = toolset("perf", securityContext={"privileged": True})
    response = answer(settings, cluster, pod_review(container))
    assert response["allowed"] is False
    assert response["auditAnnotations"]["reason"] == "beyond-profile"
    assert "privileged container, beyond what profile 'perf' grants" in response["status"][
        "message"]


@pytest.mark.parametrize(
    ("field", "value", "beyond"),
    [
        ("capabilities", "CAP_SYS_ADMIN", "capabilities CAP_SYS_ADMIN"),
        ("capabilities", "sys_admin", "capabilities sys_admin"),
        ("seLinuxOptions", {"type": "spc_t"}, "SELinux type spc_t"),
        ("appArmorProfile", {"type": "Unconfined"}, "AppArmor Unconfined"),
        ("procMount", "Unmasked", "procMount Unmasked"),
        ("windowsOptions", {"hostProcess": True}, "Windows hostProcess"),
    ],
    ids=["CAP_-prefix", "lower-case", "spc_t", "apparmor-unconfined", "proc-unmasked",
         "host-process"],
)
def test_a_toolset_cannot_ask_beyond_its_profile_by_a_field_the_old_rule_missed(
    settings: Settings, field: str, value: Any, beyond: str,
) -> None:
    """Issue 17: the gate compares by the guard's rule (Pod Security baseline, names as
    written), on a 1.23+ review where an ephemeral container carries a securityContext. alice
    holds perf and bcc; each asks for its profile's securityContext and one thing more, which
    neither profile grants (bcc grants SYS_ADMIN, not `CAP_SYS_ADMIN` or `sys_admin`)."""
    cluster = FakeCluster()
    for profile in ("perf", "bcc"):
        grant_user(cluster, "alice", profile)
    for profile in ("perf", "bcc"):
        context = copy.deepcopy(dict(settings.profiles[profile].security_context))
        if field == "capabilities":
            context["capabilities"]["add"].append(value)
        else:
            context[field] = value
        container = toolset(profile, securityContext=context)
        response = answer(settings, cluster, pod_review(container))
        assert response["allowed"] is False, profile
        assert response["auditAnnotations"]["reason"] == "beyond-profile"
        assert f"it asks for {beyond}, beyond what profile {profile!r} grants" in response[
            "status"]["message"]
        # Not our toolset (`kubectl debug` with that securityContext): only full covers it.
        debugger = {"name": "debugger-x", "image": "busybox", "securityContext": context}
        response = answer(settings, cluster, pod_review(debugger))
        assert response["allowed"] is False
        assert "--clusterrole=sidecar-debug-profile-full" in response["status"]["message"]
    grant_user(cluster, "alice", "full")
    assert answer(settings, cluster, pod_review(debugger))["allowed"] is True


def test_unprivileged_plain_container_passes_untouched_without_any_api_call(
    settings: Settings,
) -> None:
    cluster = FakeCluster()
    busybox = {"name": "debugger-1", "image": "busybox", "targetContainerName": "app"}
    response = answer(settings, cluster, pod_review(busybox))
    assert response["allowed"] is True and "patch" not in response
    assert response["auditAnnotations"] == {
        "decision": "ignored", "reason": "unprivileged-ephemeral"}
    assert cluster.calls == [] and cluster.namespace_reads == []


def test_only_new_containers_are_reviewed(settings: Settings) -> None:
    earlier = dict(SYSADMIN)  # admitted before (e.g. granted then)
    busybox = {"name": "debugger-2", "image": "busybox"}
    response = answer(settings, FakeCluster(), pod_review(busybox, old=[earlier]))
    assert response["allowed"] is True


def test_an_opt_out_label_does_not_open_the_gate(settings: Settings) -> None:
    pod = running_pod()
    pod["metadata"]["labels"] = {"debug": "disabled"}
    pod["metadata"]["annotations"] = {constants.ANNOTATION_INJECT: "false"}
    response = answer(settings, FakeCluster(), pod_review(SYSADMIN, pod=pod))
    assert response["allowed"] is False


def test_service_account_requester_gets_a_serviceaccount_binding(settings: Settings) -> None:
    user = {"username": "system:serviceaccount:ci:runner",
            "groups": ["system:serviceaccounts", "system:authenticated"]}
    response = answer(settings, FakeCluster(), pod_review(SYSADMIN, user=user))
    assert "--serviceaccount=ci:runner -n fixtures" in response["status"]["message"]


def test_controller_identities_never_grant(settings: Settings) -> None:
    user = {"username": "system:kube-controller-manager", "groups": ["system:authenticated"]}
    cluster = FakeCluster()
    grant_user(cluster, "system:kube-controller-manager", "full")
    response = answer(settings, cluster, pod_review(SYSADMIN, user=user))
    assert response["allowed"] is False
    assert "never grants" in response["status"]["message"]
    assert cluster.calls == []


@pytest.mark.parametrize("mode", ["downgrade", "skip", "deny"])
def test_a_policy_refusal_always_denies_an_ephemeral_container(
    settings: Settings, tmp_path: Path, mode: str,
) -> None:
    """The policy allows only lttng in namespace fixtures: attaching perf is denied whatever the
    rule's mode (an ephemeral container cannot be downgraded), even with the RBAC grant."""
    policy = policy_text(rules=(
        "- name: lttng-only\n"
        "  match:\n"
        "    namespaces: [fixtures]\n"
        "  allowedProfiles: [lttng]\n"
        f"  mode: {mode}\n"
    ))
    cluster = FakeCluster()
    grant_user(cluster, "alice", "perf")
    response = answer(settings, cluster, pod_review(toolset("perf")), policy=policy,
                      tmp_path=tmp_path)
    assert response["allowed"] is False
    assert "not allowed by policy rule 'lttng-only'" in response["status"]["message"]
    assert response["auditAnnotations"]["reason"] == "not-allowed-by-policy"
    response = answer(settings, cluster, pod_review(toolset("lttng")), policy=policy,
                      tmp_path=tmp_path)
    assert response["allowed"] is True


def test_toolset_with_an_image_the_policy_does_not_allow(settings: Settings) -> None:
    cluster = FakeCluster()
    grant_user(cluster, "alice", "perf")
    container = toolset("perf", image="evil.example/toolset:1")
    response = answer(settings, cluster, pod_review(container))
    assert response["allowed"] is False
    assert response["auditAnnotations"]["reason"] == "image-not-allowed"


@pytest.mark.parametrize(
    ("env", "reason"),
    [
        ([{"name": constants.ENV_PROFILE, "value": "nope"}], "unknown-profile"),
        ([{"name": constants.ENV_PROFILE, "valueFrom": {"fieldRef": {"fieldPath": "x"}}}],
         "invalid-profile"),
    ],
)
def test_bad_profile_requests_are_refused_with_400(
    settings: Settings, env: list[dict[str, Any]], reason: str,
) -> None:
    container = {"name": "debug-toolset-x", "image": TOOLSET, "env": env}
    response = answer(settings, FakeCluster(), pod_review(container))
    assert response["allowed"] is False and response["status"]["code"] == 400
    assert response["auditAnnotations"]["reason"] == reason


def test_malformed_ephemeral_list_gets_an_answer_not_a_traceback(
    settings: Settings, caplog: pytest.LogCaptureFixture,
) -> None:
    body = pod_review(SYSADMIN)
    body["request"]["object"]["spec"]["ephemeralContainers"] = ["not-a-container"]
    response = answer(settings, FakeCluster(), body)
    assert response["allowed"] is False
    assert "spec.ephemeralContainers[0]" in response["status"]["message"]
    assert "Traceback" not in caplog.text


def test_denials_are_logged_like_injections(
    settings: Settings, caplog: pytest.LogCaptureFixture,
) -> None:
    from webhook import metrics

    before = metrics.REVIEWS.labels("denied", "no-rbac-grant")._value.get()
    with caplog.at_level("INFO"):
        answer(settings, FakeCluster(), pod_review(SYSADMIN))
    assert metrics.REVIEWS.labels("denied", "no-rbac-grant")._value.get() == before + 1
    # log_fields' extra: read as webhook.logs reads it (a LogRecord declares no `fields`).
    fields = next(
        found for found in (getattr(r, "fields", {}) for r in caplog.records)
        if found.get("decision") == "denied"
    )
    assert fields["pod"] == "ephemeral-pod" and fields["namespace"] == "fixtures"
    assert fields["profile"] == "full" and fields["reason"] == "no-rbac-grant"


def test_excluded_namespaces_are_skipped_by_the_requests_name(settings: Settings) -> None:
    """Issue 24: on Kubernetes < 1.21 the chart's entries cannot leave kube-system out by the
    unprotected name label, so the gate does, by the namespace the apiserver names; any other
    namespace is judged whatever its labels say."""
    body = pod_review(SYSADMIN)
    body["request"]["namespace"] = "kube-system"
    response = answer(settings, FakeCluster(), body)
    assert response["allowed"] is True and "patch" not in response
    assert answer(settings, FakeCluster(), pod_review(SYSADMIN))["allowed"] is False
