"""The privilege rule, once: whether a profile needs a grant, and what Pod Security rejects."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

# Capabilities the Pod Security "baseline" level lets a container add; anything else is a grant.
BASELINE_CAPABILITIES = frozenset(
    {
        "AUDIT_WRITE",
        "CHOWN",
        "DAC_OVERRIDE",
        "FOWNER",
        "FSETID",
        "KILL",
        "MKNOD",
        "NET_BIND_SERVICE",
        "SETFCAP",
        "SETGID",
        "SETPCAP",
        "SETUID",
        "SYS_CHROOT",
    }
)


def privilege_reasons(
    security_context: Mapping[str, Any], host_paths: Sequence[str]
) -> tuple[str, ...]:
    """Why a sidecar with this securityContext and these hostPath mounts needs an RBAC grant:
    privileged, capabilities beyond baseline, hostPath volumes, seccomp Unconfined, privilege
    escalation. Empty when it stays within Pod Security baseline. The chart's copy
    (templates/_helpers.tpl) must agree with this function."""
    reasons: list[str] = []
    sc = security_context
    if sc.get("privileged"):
        reasons.append("privileged container")
    added = set((sc.get("capabilities") or {}).get("add") or ())
    beyond = sorted(cap for cap in added if cap.removeprefix("CAP_") not in BASELINE_CAPABILITIES)
    if beyond:
        reasons.append("capabilities " + ", ".join(beyond))
    if host_paths:
        reasons.append("hostPath " + ", ".join(host_paths))
    if (sc.get("seccompProfile") or {}).get("type") == "Unconfined":
        reasons.append("seccomp Unconfined")
    if sc.get("allowPrivilegeEscalation") is True:
        reasons.append("allowPrivilegeEscalation")
    return tuple(reasons)


def pod_security_violations(
    security_context: Mapping[str, Any], host_paths: Sequence[str], level: str
) -> list[str]:
    """What in a sidecar with this securityContext and these hostPath mounts a Pod Security
    `level` namespace would reject."""
    if level not in ("baseline", "restricted"):
        return []
    sc = security_context
    found: list[str] = []
    if sc.get("privileged"):
        found.append("privileged")
    added = {c.removeprefix("CAP_") for c in (sc.get("capabilities") or {}).get("add") or ()}
    allowed_caps = BASELINE_CAPABILITIES if level == "baseline" else frozenset({"NET_BIND_SERVICE"})
    if added - allowed_caps:
        found.append("capabilities " + ", ".join(sorted(added - allowed_caps)))
    if host_paths:
        found.append("hostPath volumes")
    if level == "restricted":
        if sc.get("allowPrivilegeEscalation") is not False:
            found.append("allowPrivilegeEscalation not false")
        if sc.get("runAsNonRoot") is not True or sc.get("runAsUser") == 0:
            found.append("runs as root")
        if "ALL" not in ((sc.get("capabilities") or {}).get("drop") or ()):
            found.append("capabilities not dropped")
    return found
