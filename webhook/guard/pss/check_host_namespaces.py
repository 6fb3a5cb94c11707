"""hostNamespaces (baseline): no host network, PID or IPC namespace."""

from __future__ import annotations

from typing import Final

from webhook.guard.pss.checks import Check, VersionedCheck
from webhook.guard.pss.messages import set_to, unset_or_false
from webhook.guard.pss.model import Finding, Violation, finding, violation
from webhook.guard.pss.pod import PodView
from webhook.guard.pss.version import v1


def check_host_namespaces(pod: PodView) -> Finding | None:
    check, reason = "hostNamespaces", "host namespaces"
    found: list[Violation] = []
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        value = pod.spec.get(key)
        if not unset_or_false(value):
            text = f"pod must not set spec.{key}={set_to(value)}"
            found.append(violation(check, reason, f"spec.{key}", text, value, None))
    detail = ", ".join(f"{v.field.removeprefix('spec.')}={set_to(True)}" for v in found)
    return finding(check, reason, detail, found)


CHECK: Final = Check(
    "hostNamespaces",
    "baseline",
    (VersionedCheck(v1(0), check_host_namespaces),),
)
