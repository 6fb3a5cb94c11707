"""sysctls (baseline): only the safe sysctls, a list that grows with the policy version (1.0,
1.27, 1.29, 1.32, 1.37)."""

from __future__ import annotations

from typing import Final

from webhook.guard.pss.checks import Check, CheckFn, VersionedCheck
from webhook.guard.pss.messages import as_text, shown
from webhook.guard.pss.model import Finding, Violation, finding, violation
from webhook.guard.pss.pod import PodView
from webhook.guard.pss.version import Version, v1

# check_sysctls.go: the sysctls that are namespaced and isolated from other pods, by the policy
# version that made each one safe.
SAFE_SYSCTLS_BY_VERSION: Final[tuple[tuple[Version, frozenset[str]], ...]] = (
    (
        v1(0),
        frozenset(
            {
                "kernel.shm_rmid_forced",
                "net.ipv4.ip_local_port_range",
                "net.ipv4.ip_unprivileged_port_start",
                "net.ipv4.tcp_syncookies",
                "net.ipv4.ping_group_range",
            }
        ),
    ),
    (v1(27), frozenset({"net.ipv4.ip_local_reserved_ports"})),
    (
        v1(29),
        frozenset(
            {
                "net.ipv4.tcp_keepalive_time",
                "net.ipv4.tcp_fin_timeout",
                "net.ipv4.tcp_keepalive_intvl",
                "net.ipv4.tcp_keepalive_probes",
            }
        ),
    ),
    (v1(32), frozenset({"net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem"})),
    (v1(37), frozenset({"net.ipv4.tcp_slow_start_after_idle", "net.ipv4.tcp_notsent_lowat"})),
)


def safe_sysctls(version: Version) -> frozenset[str]:
    """The sysctls safe at policy `version`."""
    return frozenset().union(
        *(names for since, names in SAFE_SYSCTLS_BY_VERSION if since <= version)
    )


SAFE_SYSCTLS: Final = safe_sysctls(SAFE_SYSCTLS_BY_VERSION[-1][0])


def _sysctls(pod: PodView, safe: frozenset[str]) -> Finding | None:
    check, reason = "sysctls", "forbidden sysctls"
    found: list[Violation] = []
    names: list[str] = []
    where = "spec.securityContext.sysctls"
    for index, sysctl in enumerate(pod.sequence(pod.security.get("sysctls"), where)):
        name = (pod.item(sysctl, f"{where}[{index}]") or {}).get("name")
        if isinstance(name, str) and name in safe:
            continue
        names.append(as_text(name))
        text = f"pod must not set sysctl {shown(name)}"
        found.append(violation(check, reason, f"{where}[{index}].name", text, name, None))
    return finding(check, reason, ", ".join(names), found)


def _at(version: Version) -> CheckFn:
    safe = safe_sysctls(version)

    def check_sysctls(pod: PodView) -> Finding | None:
        return _sysctls(pod, safe)

    return check_sysctls


CHECK: Final = Check(
    "sysctls",
    "baseline",
    tuple(VersionedCheck(since, _at(since)) for since, _ in SAFE_SYSCTLS_BY_VERSION),
)
