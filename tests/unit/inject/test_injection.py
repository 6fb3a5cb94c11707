"""The injection cases issue #2 lists, through the whole review path, as users rely on them."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.unit.core_helpers import (
    ADMITTED,
    admission_review,
    default_settings,
    injected,
    mutator,
    settings_with,
)
from webhook.admission.review import decode_patch
from webhook.config import load_settings
from webhook.errors import SettingsError
from webhook.guard.privilege import requires_grant
from webhook.inject.decision import decide
from webhook.policy.api import AllowAll, PolicyRequest
from webhook.wire import constants


def pod(**spec: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"containers": [{"name": "app", "image": "busybox"}]}
    base.update(spec)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": base}


def mounts(container: dict[str, Any]) -> dict[str, str]:
    return {m["mountPath"]: m["name"] for m in container.get("volumeMounts", [])}


def test_full_profile_gives_sidecar_first_shared_pids_and_mounts_everywhere() -> None:
    result, response = injected(pod())
    spec = result["spec"]
    sidecar, app = spec["containers"]
    assert sidecar["name"] == "debug-toolset"
    assert sidecar["securityContext"]["privileged"] is True
    assert spec["shareProcessNamespace"] is True
    assert mounts(app)["/tmp"] == mounts(sidecar)["/tmp"]
    assert mounts(app)["/var/run/lttng"] == mounts(sidecar)["/var/run/lttng"]
    host = {m["mountPath"]: m for m in sidecar["volumeMounts"] if m.get("readOnly")}
    assert set(host) == {"/usr/src", "/lib/modules"}
    assert "/usr/src" not in mounts(app) and "/lib/modules" not in mounts(app)
    assert sidecar["lifecycle"]["postStart"]["exec"]["command"] == [
        "toolset-entrypoint",
        "--wait-ready",
    ]
    status = json.loads(result["metadata"]["annotations"][constants.ANNOTATION_STATUS])
    assert status["profile"] == "full" and status["version"] and status["grant"] == "test"
    assert result["metadata"]["annotations"]["kubectl.kubernetes.io/default-container"] == "app"
    assert response["auditAnnotations"]["decision"] == "injected"


def test_lttng_profile_has_no_privilege_at_all() -> None:
    p = pod()
    p["metadata"]["annotations"] = {constants.ANNOTATION_PROFILE: "lttng"}
    result, _ = injected(p)
    sidecar = result["spec"]["containers"][0]
    assert sidecar["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert sidecar["securityContext"]["allowPrivilegeEscalation"] is False
    assert not any("hostPath" in v for v in result["spec"]["volumes"])
    assert set(mounts(sidecar)) == {"/var/run/lttng"}
    assert requires_grant(default_settings().profiles["lttng"]) is False
    for name in ("perf", "bcc", "full"):
        assert requires_grant(default_settings().profiles[name]), name


def test_reinvocation_and_already_injected_pod_give_empty_patch() -> None:
    first, _ = injected(pod())
    review = mutator().review(admission_review(first))
    assert "patch" not in review["response"]
    assert review["response"]["allowed"] is True
    assert review["response"]["auditAnnotations"]["reason"] == "already-injected"


def test_stale_status_annotation_without_sidecar_is_injected_again() -> None:
    p = pod()
    p["metadata"]["annotations"] = {constants.ANNOTATION_STATUS: '{"container":"debug-toolset"}'}
    result, _ = injected(p)
    assert result["spec"]["containers"][0]["name"] == "debug-toolset"


@pytest.mark.parametrize(
    ("labels", "annotations", "reason"),
    [
        ({"debug": "disabled"}, {}, "opt-out-label"),
        ({}, {constants.ANNOTATION_INJECT: "false"}, "opt-out-annotation"),
        ({}, {constants.ANNOTATION_INJECT: "False"}, "opt-out-annotation"),
    ],
)
def test_opt_out(labels: dict[str, str], annotations: dict[str, str], reason: str) -> None:
    p = pod()
    p["metadata"].update(labels=labels, annotations=annotations)
    review = mutator().review(admission_review(p))
    assert "patch" not in review["response"]
    assert review["response"]["auditAnnotations"]["reason"] == reason


@pytest.mark.parametrize(
    "namespace", ["kube-system", "kube-public", "kube-node-lease", "sidecar-debug"]
)
def test_excluded_namespaces_are_never_injected(namespace: str) -> None:
    settings = settings_with(webhook_namespace="sidecar-debug")
    review = mutator(settings).review(admission_review(pod(), namespace=namespace))
    assert "patch" not in review["response"]
    assert review["response"]["auditAnnotations"]["reason"] == "excluded-namespace"


def test_excluded_namespaces_setting_cannot_drop_the_system_ones() -> None:
    settings = load_settings(environ={"SIDECAR_DEBUG_EXCLUDED_NAMESPACES": "team-a"})
    assert {
        "team-a",
        "kube-system",
        "kube-public",
        "kube-node-lease",
    } <= settings.excluded_namespaces


def test_unknown_profile_is_refused_with_the_known_ones_named() -> None:
    p = pod()
    p["metadata"]["annotations"] = {constants.ANNOTATION_PROFILE: "fulll"}
    response = mutator().review(admission_review(p))["response"]
    assert response["allowed"] is False
    assert response["status"]["code"] == 400
    message = response["status"]["message"]
    assert "'fulll'" in message and "bcc, full, lttng, perf" in message


def test_empty_object_namespace_uses_the_request_namespace() -> None:
    p = pod()
    p["metadata"] = {"generateName": "job-"}
    decision = decide(p, "kube-system", default_settings())
    assert decision.reason == "excluded-namespace"
    review = mutator().review(admission_review(p, namespace="kube-system"))
    assert "patch" not in review["response"]


def test_existing_tmp_volume_is_shared_not_duplicated() -> None:
    p = pod(volumes=[{"name": "scratch", "emptyDir": {}}])
    p["spec"]["containers"][0]["volumeMounts"] = [{"name": "scratch", "mountPath": "/tmp"}]
    result, _ = injected(p)
    sidecar = result["spec"]["containers"][0]
    assert mounts(sidecar)["/tmp"] == "scratch"
    assert [v["name"] for v in result["spec"]["volumes"]].count("scratch") == 1
    assert "sidecar-debug-tmp" not in {v["name"] for v in result["spec"]["volumes"]}


def test_host_pid_pod_does_not_get_share_process_namespace() -> None:
    result, _ = injected(pod(hostPID=True))
    assert "shareProcessNamespace" not in result["spec"]


def test_explicit_share_process_namespace_false_is_overridden_with_a_warning() -> None:
    result, response = injected(pod(shareProcessNamespace=False))
    assert result["spec"]["shareProcessNamespace"] is True
    assert any("shareProcessNamespace" in w for w in response["warnings"])


def test_init_containers_are_left_alone() -> None:
    init = {"name": "migrate", "image": "busybox", "command": ["true"]}
    result, _ = injected(pod(initContainers=[dict(init)]))
    assert result["spec"]["initContainers"] == [init]


def test_user_env_is_never_overwritten_and_node_options_is_appended_once() -> None:
    p = pod()
    p["metadata"]["annotations"] = {constants.ANNOTATION_RUNTIME: "node"}
    p["spec"]["containers"][0]["env"] = [{"name": "NODE_OPTIONS", "value": "--inspect"}]
    result, _ = injected(p)
    env = {e["name"]: e for e in result["spec"]["containers"][1]["env"]}
    assert env["NODE_OPTIONS"]["value"] == "--inspect --perf-basic-prof"
    p["spec"]["containers"][0]["env"] = [{"name": "NODE_OPTIONS", "value": "--perf-basic-prof"}]
    result, _ = injected(p)
    assert result["spec"]["containers"][1]["env"] == [
        {"name": "NODE_OPTIONS", "value": "--perf-basic-prof"}
    ]


def test_dotnet_hints_follow_the_profile_techniques() -> None:
    p = pod()
    p["metadata"]["annotations"] = {
        constants.ANNOTATION_RUNTIME: "dotnet",
        constants.ANNOTATION_PROFILE: "perf",
    }
    p["spec"]["containers"][0]["env"] = [{"name": "DOTNET_PerfMapEnabled", "value": "0"}]
    result, _ = injected(p)
    env = {e["name"]: e["value"] for e in result["spec"]["containers"][1]["env"]}
    assert env == {"DOTNET_PerfMapEnabled": "0", "COMPlus_PerfMapEnabled": "1"}


def test_unknown_runtime_is_a_warning_not_a_refusal() -> None:
    p = pod()
    p["metadata"]["annotations"] = {constants.ANNOTATION_RUNTIME: "cobol"}
    result, response = injected(p)
    assert result["spec"]["containers"][0]["name"] == "debug-toolset"
    assert any("unknown runtime 'cobol'" in w for w in response["warnings"])


def test_a_platform_team_adds_a_profile_without_code(tmp_path: Any) -> None:
    profiles = tmp_path / "profiles.yaml"
    profiles.write_text(
        "profiles:\n"
        "  - name: gdb\n"
        "    techniques: []\n"
        "    securityContext: {capabilities: {add: [SYS_PTRACE]}}\n"
    )
    settings = load_settings(
        environ={
            "SIDECAR_DEBUG_PROFILES_FILE": str(profiles),
            "SIDECAR_DEBUG_DEFAULT_PROFILE": "gdb",
        }
    )
    assert requires_grant(settings.profiles["gdb"])
    result, _ = injected(pod(), settings=settings)
    assert result["spec"]["containers"][0]["securityContext"] == {
        "capabilities": {"add": ["SYS_PTRACE"]}
    }


@pytest.mark.parametrize(
    ("environ", "field"),
    [
        ({"SIDECAR_DEBUG_PORT": "http"}, "SIDECAR_DEBUG_PORT"),
        ({"SIDECAR_DEBUG_DEFAULT_PROFILE": "nope"}, "defaultProfile"),
        ({"SIDECAR_DEBUG_SIDECAR_NAME": "Bad_Name"}, "sidecarName"),
        ({"SIDECAR_DEBUG_IMAGE_PULL_POLICY": "Sometimes"}, "imagePullPolicy"),
        ({"SIDECAR_DEBUG_NATIVE_SIDECAR": "maybe"}, "SIDECAR_DEBUG_NATIVE_SIDECAR"),
        ({"SIDECAR_DEBUG_DEBUGINFOD_URLS": "file:///etc/passwd"}, "debuginfodUrls"),
        ({"SIDECAR_DEBUG_DEBUGINFOD_URLS": "https://a.example ftp://b"}, "debuginfodUrls"),
        ({"SIDECAR_DEBUG_DEBUGINFOD_TIMEOUT_SECONDS": "0"}, "debuginfodTimeoutSeconds"),
        ({"SIDECAR_DEBUG_DEBUGINFOD_MAX_BYTES": "1000"}, "debuginfodMaxBytes"),
    ],
)
def test_bad_settings_fail_at_start_naming_the_field(environ: dict[str, str], field: str) -> None:
    with pytest.raises(SettingsError, match=field):
        load_settings(environ=environ)


def test_config_file_typo_names_the_key_and_the_known_ones(tmp_path: Any) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("toolsetImagee: x\n")
    with pytest.raises(
        SettingsError, match=r"toolsetImagee: unknown setting; known: .*toolsetImage"
    ):
        load_settings(str(config), environ={})


def test_patch_escapes_slash_and_tilde_in_new_keys() -> None:
    p = pod()
    p["metadata"]["annotations"] = {"a/b~c": "1"}
    review = mutator().review(admission_review(p))
    paths = [op["path"] for op in decode_patch(review)]
    assert "/metadata/annotations/sidecar-debug.io~1status" in paths
    assert not any("a/b" in path for path in paths)


def test_debuginfod_servers_reach_the_toolset_env_only_when_set() -> None:
    result, _ = injected(pod())
    names = {e["name"] for e in result["spec"]["containers"][0]["env"]}
    assert not names & {"DEBUGINFOD_URLS", "DEBUGINFOD_MAXTIME", "DEBUGINFOD_MAXSIZE"}
    settings = load_settings(environ={
        "SIDECAR_DEBUG_DEBUGINFOD_URLS": " https://debuginfod.example  http://10.0.0.7:8002 ",
        "SIDECAR_DEBUG_DEBUGINFOD_TIMEOUT_SECONDS": "12"})
    result, _ = injected(pod(), settings=settings)
    env = {e["name"]: e["value"] for e in result["spec"]["containers"][0]["env"]}
    assert env["DEBUGINFOD_URLS"] == "https://debuginfod.example http://10.0.0.7:8002"
    assert (env["DEBUGINFOD_MAXTIME"], env["DEBUGINFOD_MAXSIZE"]) == ("12", str(512 << 20))
    assert result["spec"]["containers"][1].get("env") is None  # the app's: untouched


def test_the_no_op_engine_offline_and_without_a_policy() -> None:
    # One no-op engine (issue 27): offline `inject` takes AllowAll.offline(), a Mutator given
    # no policy AllowAll(); they differ in grant, reason, message, image and start only.
    perf = default_settings().profiles["perf"]
    asked = PolicyRequest("dev", "default", {}, perf, "registry.example/toolset:2")
    offline = AllowAll.offline().evaluate(asked)
    assert (offline.allowed, offline.reason, offline.grant, offline.image, offline.started) == (
        True, "offline-inject", "offline", None, None)
    assert offline.message == "profile 'perf' injected offline"
    bare = AllowAll(clock=lambda: ADMITTED).evaluate(asked)
    assert (bare.reason, bare.grant, bare.image, bare.started) == (
        "no-policy", "no-policy", "registry.example/toolset:2", ADMITTED)
    assert bare.message == "profile 'perf' injected (no policy configured)"
    assert AllowAll.offline().namespace_mode("dev") is None
