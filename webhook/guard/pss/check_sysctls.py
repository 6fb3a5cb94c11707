"""sysctls (baseline): only the safe sysctls."""

from __future__ import annotations

from typing import Final

from webhook.guard.pss.checks import Check
from webhook.guard.pss.messages import as_text, shown
from webhook.guard.pss.model import Finding, Violation, finding, violation
from webhook.guard.pss.pod import PodView

# check_sysctls.go (1.32): namespaced and isolated from other pods.
SAFE_SYSCTLS: Final = frozenset(
    {
        "kernel.shm_rmid_forced",
        "net.ipv4.ip_local_port_range",
        "net.ipv4.ip_unprivileged_port_start",
        "net.ipv4.tcp_syncookies",
        "net.ipv4.ping_group_range",
        "net.ipv4.ip_local_reserved_ports",
        "net.ipv4.tcp_keepalive_time",
        "net.ipv4.tcp_fin_timeout",
        "net.ipv4.tcp_keepalive_intvl",
        "net.ipv4.tcp_keepalive_probes",
        "net.ipv4.tcp_rmem",
        "net.ipv4.tcp_wmem",
    }
)


def check_sysctls(pod: PodView) -> Finding | None:
    check, reason = "sysctls", "forbidden sysctls"
    found: list[Violation] = []
    names: list[str] = []
    where = "spec.securityContext.sysctls"
    for index, sysctl in enumerate(pod.sequence(pod.security.get("sysctls"), where)):
        name = (pod.item(sysctl, f"{where}[{index}]") or {}).get("name")
        if isinstance(name, str) and name in SAFE_SYSCTLS:
            continue
        names.append(as_text(name))
        text = f"pod must not set sysctl {shown(name)}"
        found.append(violation(check, reason, f"{where}[{index}].name", text, name, None))
    return finding(check, reason, ", ".join(names), found)


CHECK: Final = Check("sysctls", "baseline", check_sysctls)
