"""Issue 17 item 4 (the guard's pure decision): Pod Security on every container except a
verified toolset whose profile is granted, and of the volumes only that toolset's own
hostPaths."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.unit.core_helpers import default_settings, settings_with
from tests.unit.guard.test_toolset import as_admitted, attached, injected, sidecar
from webhook.guard import check, pss, toolset


class Grants:
    """granted(profile) for a requester holding `held`; records what it was asked."""

    def __init__(self, *held: str) -> None:
        self.held = set(held)
        self.asked: list[str] = []

    def __call__(self, profile: str) -> bool:
        self.asked.append(profile)
        return profile in self.held


def fields(result: check.GuardResult) -> set[tuple[str, str]]:
    return {(v.check, v.field) for v in result.violations}


@pytest.mark.parametrize("profile", ["perf", "bcc", "full"])
@pytest.mark.parametrize("native", [False, True])
def test_a_granted_toolset_is_exempt_and_the_app_is_not(profile: str, native: bool) -> None:
    cfg = settings_with(native_sidecar=native)
    pod = as_admitted(injected(profile, cfg))
    grants = Grants(profile)
    result = check.evaluate(pod, cfg, "baseline", grants)
    assert result.allowed, result.message()
    assert grants.asked == [profile]
    assert [t.profile for t in result.exempted] == [profile]
    # The same pod with a privileged app: the app is refused, the toolset still exempt.
    pod["spec"]["containers"][-1]["securityContext"] = {"privileged": True}
    result = check.evaluate(pod, cfg, "baseline", Grants(profile))
    assert fields(result) == {("privileged", f"spec.containers[{0 if native else 1}]"
                                              ".securityContext.privileged")}


@pytest.mark.parametrize("profile", ["perf", "bcc", "full"])
def test_without_the_grant_the_toolset_is_checked_like_any_container(profile: str) -> None:
    pod = injected(profile)
    result = check.evaluate(pod, default_settings(), "baseline", Grants())
    assert not result.allowed
    assert [t.profile for t in result.ungranted] == [profile]
    assert result.exempted == ()
    assert all(v.container is None or v.container.name == "debug-toolset"
               for v in result.violations)
    assert "the grant is missing" in result.notes()[0]
    expected = {"full": "privileged", "perf": "capabilities_baseline", "bcc": "hostPathVolumes"}
    assert expected[profile] in {v.check for v in result.violations}


def test_a_profile_within_baseline_needs_no_grant_and_asks_none() -> None:
    grants = Grants()
    result = check.evaluate(injected("lttng"), default_settings(), "baseline", grants)
    assert result.allowed and grants.asked == []
    # In a restricted namespace the verified lttng toolset (root, no seccomp) is exempt too;
    # the app is checked at restricted.
    result = check.evaluate(injected("lttng"), default_settings(), "restricted", grants)
    assert {v.container.name for v in result.violations if v.container} == {"app"}


def test_offline_the_structure_is_verified_and_the_grant_reported_unchecked() -> None:
    result = check.evaluate(injected("full"), default_settings(), "baseline", None)
    assert result.allowed
    assert [t.profile for t in result.unchecked] == ["full"]
    assert "cannot be checked offline" in result.notes()[0]


def test_the_grant_is_asked_once_per_profile() -> None:
    pod = injected("bcc")
    attached(pod, "full", suffix="aaaaaa")
    attached(pod, "full", suffix="bbbbbb")
    grants = Grants("bcc", "full")
    result = check.evaluate(pod, default_settings(), "baseline", grants)
    assert result.allowed, result.message()
    assert sorted(grants.asked) == ["bcc", "full"]


def test_an_attached_toolset_without_grant_is_refused_while_the_sidecar_stays_exempt() -> None:
    pod = injected("lttng")
    attached(pod, "full", suffix="cccccc")
    result = check.evaluate(pod, default_settings(), "baseline", Grants())
    assert fields(result) == {
        ("privileged", "spec.ephemeralContainers[0].securityContext.privileged")}


def test_the_toolsets_host_paths_are_exempt_only_while_no_other_container_mounts_them() -> None:
    pod = injected("bcc")
    app = pod["spec"]["containers"][1]
    app.setdefault("volumeMounts", []).append(
        {"name": "sidecar-debug-lib-modules", "mountPath": "/lib/modules"})
    result = check.evaluate(pod, default_settings(), "baseline", Grants("bcc"))
    [violation] = result.violations
    assert (violation.check, violation.volume) == ("hostPathVolumes", "sidecar-debug-lib-modules")
    # ... or attaches it as a device
    pod = injected("bcc")
    pod["spec"]["containers"][1]["volumeDevices"] = [
        {"name": "sidecar-debug-usr-src", "devicePath": "/dev/x"}]
    result = check.evaluate(pod, default_settings(), "baseline", Grants("bcc"))
    assert {v.volume for v in result.violations} == {"sidecar-debug-usr-src"}


def test_a_second_hostpath_volume_beside_the_profiles_is_not_exempt() -> None:
    pod = injected("bcc")
    pod["spec"]["volumes"].append({"name": "root", "hostPath": {"path": "/"}})
    result = check.evaluate(pod, default_settings(), "baseline", Grants("bcc"))
    assert fields(result) == {("hostPathVolumes", "spec.volumes[3].hostPath")}


def test_pod_level_fields_are_checked_however_granted_the_toolset() -> None:
    pod = injected("full")
    pod["spec"]["hostPID"] = True
    pod["spec"]["securityContext"] = {"seLinuxOptions": {"type": "spc_t"},
                                      "sysctls": [{"name": "kernel.core_pattern", "value": "|x"}]}
    result = check.evaluate(pod, default_settings(), "baseline", Grants("full"))
    assert {v.check for v in result.violations} == {"hostNamespaces", "seLinuxOptions",
                                                   "sysctls"}


def test_a_container_running_the_toolset_image_is_refused_however_harmless() -> None:
    pod = injected("lttng")
    pod["spec"]["containers"].append({"name": "tools", "image": sidecar(pod)["image"]})
    result = check.evaluate(pod, default_settings(), "baseline", Grants())
    assert fields(result) == {(toolset.CHECK_IMAGE, "spec.containers[2].image")}
    assert result.message().startswith('container "tools" runs the toolset image')


def test_a_renamed_copy_of_a_granted_sidecar_shares_nothing_of_its_exemption() -> None:
    """A second container borrowing the verified sidecar's name is not exempted by name."""
    pod = injected("full")
    impostor = copy.deepcopy(sidecar(pod))
    impostor["image"] = "registry.example/evil:1"
    impostor["env"].append({"name": "LD_PRELOAD", "value": "/tmp/x"})
    pod["spec"]["initContainers"] = [impostor]
    result = check.evaluate(pod, default_settings(), "baseline", Grants("full"))
    assert ("privileged", "spec.initContainers[0].securityContext.privileged") in fields(result)
    assert (pss.MALFORMED, "spec.containers[0].name") in fields(result)


def test_the_message_is_pod_securitys_then_the_toolsets() -> None:
    pod = injected("lttng")
    pod["spec"]["hostNetwork"] = True
    pod["spec"]["containers"].append({"name": "tools", "image": sidecar(pod)["image"]})
    result = check.evaluate(pod, default_settings(), "baseline", Grants())
    assert result.message() == (
        'violates PodSecurity "baseline:latest (v1.37)": host namespaces (hostNetwork=true); '
        'container "tools" runs the toolset image (ghcr.io/sidecar-debug/toolset) but is not '
        "the toolset sidecar-debug builds: it names no debug profile (SIDECAR_DEBUG_PROFILE)"
    )


@pytest.mark.parametrize("subject", [None, [], {"spec": "x"}, {"spec": {"containers": [1]}}])
def test_hostile_pods_never_raise(subject: Any) -> None:
    result = check.evaluate(subject, default_settings(), "restricted", Grants())
    assert isinstance(result.message(), str)
