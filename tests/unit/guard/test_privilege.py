"""Issue 17 item 4: one privilege rule. A profile needs a grant exactly when its sidecar, as
built, goes beyond Pod Security baseline, by the guard's own checks; the old rule let SELinux
spc_t, AppArmor unconfined, an unmasked /proc, Windows host processes and `CAP_`-spelled
capabilities through as unprivileged."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.core_helpers import default_settings
from webhook.guard import check, pss
from webhook.guard.privilege import (
    pod_security_refusal,
    privilege_reasons,
    profile_reasons,
    requires_grant,
    sidecar_pod,
)
from webhook.profiles import parse_profile_set


@pytest.mark.parametrize(
    ("security_context", "reason"),
    [
        ({"seLinuxOptions": {"type": "spc_t"}}, "SELinux type spc_t"),
        ({"seLinuxOptions": {"user": "system_u"}}, "SELinux user system_u"),
        ({"appArmorProfile": {"type": "Unconfined"}}, "AppArmor Unconfined"),
        ({"procMount": "Unmasked"}, "procMount Unmasked"),
        ({"windowsOptions": {"hostProcess": True}}, "Windows hostProcess"),
        ({"capabilities": {"add": ["CAP_SYS_ADMIN"]}}, "capabilities CAP_SYS_ADMIN"),
        ({"capabilities": {"add": ["sys_admin"]}}, "capabilities sys_admin"),
        ({"capabilities": {"add": ["CAP_CHOWN"]}}, "capabilities CAP_CHOWN"),
        ({"seccompProfile": {"type": "unconfined"}}, "seccomp unconfined"),
        ({"privileged": "true"}, "privileged container"),
        ({"capabilities": "ALL"}, "invalid securityContext.capabilities"),
    ],
)
def test_what_the_old_rule_missed_needs_a_grant(
    security_context: dict[str, Any], reason: str
) -> None:
    assert privilege_reasons(security_context, []) == (reason,)


@pytest.mark.parametrize(
    "security_context",
    [
        {},
        {"runAsUser": 0, "runAsNonRoot": False},
        {"capabilities": {"add": ["CHOWN", "KILL", "NET_BIND_SERVICE"], "drop": ["ALL"]}},
        {"seccompProfile": {"type": "RuntimeDefault"}},
        {"appArmorProfile": {"type": "Localhost", "localhostProfile": "toolset"}},
        {"seLinuxOptions": {"type": "container_t", "level": "s0:c1,c2"}},
        {"procMount": "Default"},
        # Baseline allows privilege escalation (restricted does not): no grant, by the one rule.
        {"allowPrivilegeEscalation": True},
    ],
)
def test_what_baseline_allows_needs_no_grant(security_context: dict[str, Any]) -> None:
    assert privilege_reasons(security_context, []) == ()


def test_host_paths_are_reasons_with_their_paths() -> None:
    assert privilege_reasons({"privileged": True}, ["/usr/src", "/lib/modules"]) == (
        "privileged container", "hostPath /usr/src, /lib/modules")


def test_the_builtin_profiles_keep_their_answer() -> None:
    profiles = default_settings().profiles
    assert {name for name, p in profiles.items() if requires_grant(p)} == {"perf", "bcc", "full"}
    assert profile_reasons(profiles["perf"]) == (
        "capabilities PERFMON, SYSLOG, SYS_PTRACE", "seccomp Unconfined")


def test_a_custom_profile_asking_for_spc_t_needs_a_grant() -> None:
    profile_set = parse_profile_set({"profiles": [{
        "name": "selinux-debug", "techniques": ["perf"],
        "securityContext": {"seLinuxOptions": {"type": "spc_t"}},
    }]}, "test")
    profile = profile_set.profiles["selinux-debug"]
    assert requires_grant(profile)
    assert profile_reasons(profile) == ("SELinux type spc_t",)


def test_the_rule_is_the_guards_exemption() -> None:
    """Every built-in profile: the sidecar as built passes baseline exactly when the rule says
    it needs no grant, so the guard exempts (for a granted toolset) precisely what the grant
    covers."""
    for profile in default_settings().profiles.values():
        pod = sidecar_pod(profile.security_context, [h.path for h in profile.host_paths])
        assert (pss.check_pod(pod, "baseline") == []) == (not requires_grant(profile))


def test_a_namespace_level_check_says_what_pod_security_would_say() -> None:
    """Issue 17: the namespace warning quotes Pod Security admission's own message (pss.py,
    the one source of messages), naming the sidecar container, not short labels."""
    profiles = default_settings().profiles
    lttng, full = profiles["lttng"], profiles["full"]
    assert pod_security_refusal(lttng.security_context, {}, "restricted", "debug-toolset") == (
        'violates PodSecurity "restricted:latest (v1.37)": runAsNonRoot != true (container '
        '"debug-toolset" must not set securityContext.runAsNonRoot=false), runAsUser=0 '
        '(container "debug-toolset" must not set runAsUser=0), seccompProfile (pod or container '
        '"debug-toolset" must set securityContext.seccompProfile.type to "RuntimeDefault" or '
        '"Localhost")')
    usr_src = {"sidecar-debug-usr-src": "/usr/src"}
    for level in ("privileged", "", "Baseline"):
        assert pod_security_refusal(full.security_context, usr_src, level, "x") == ""
    assert pod_security_refusal(full.security_context, usr_src, "baseline", "x") == (
        'violates PodSecurity "baseline:latest (v1.37)": hostPath volumes (volume '
        '"sidecar-debug-usr-src"), privileged (container "x" must not set '
        "securityContext.privileged=true)")
    assert pod_security_refusal(lttng.security_context, {}, "baseline", "x") == ""


def test_an_unprivileged_profile_in_a_restricted_namespace_is_exempt_once_verified() -> None:
    """check.evaluate exempts a verified toolset whose profile needs no grant at any level."""
    from tests.unit.guard.test_toolset import injected

    result = check.evaluate(injected("lttng"), default_settings(), "restricted", lambda p: False)
    assert [t.profile for t in result.exempted] == ["lttng"]
