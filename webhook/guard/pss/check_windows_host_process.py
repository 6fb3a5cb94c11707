"""windowsHostProcess (baseline): no Windows HostProcess containers."""

from __future__ import annotations

from typing import Final

from webhook.guard.pss.checks import Check, VersionedCheck
from webhook.guard.pss.messages import quote, set_to, unset_or_false
from webhook.guard.pss.model import Finding, Violation, finding, setters, unique, violation
from webhook.guard.pss.pod import PodView
from webhook.guard.pss.version import v1


def check_host_process(pod: PodView) -> Finding | None:
    check, reason = "windowsHostProcess", "hostProcess"
    found: list[Violation] = []
    options = pod.mapping(pod.security.get("windowsOptions"), "spec.securityContext.windowsOptions")
    value = options.get("hostProcess")
    if not unset_or_false(value):
        path = "spec.securityContext.windowsOptions.hostProcess"
        text = f"pod must not set securityContext.windowsOptions.hostProcess={set_to(value)}"
        found.append(violation(check, reason, path, text, value, None))
    for c in pod.containers:
        where = f"{c.ref.path}.securityContext.windowsOptions"
        value = pod.mapping(c.security.get("windowsOptions"), where).get("hostProcess")
        if not unset_or_false(value):
            text = (
                f"container {quote(c.ref.name)} must not set "
                f"securityContext.windowsOptions.hostProcess={set_to(value)}"
            )
            found.append(violation(check, reason, f"{where}.hostProcess", text, value, c.ref))
    refs = unique(v.container for v in found if v.container)
    pod_set = any(v.container is None for v in found)
    detail = (
        f"{setters(pod_set, refs)} must not set securityContext.windowsOptions.hostProcess=true"
    )
    return finding(check, reason, detail, found)


CHECK: Final = Check(
    "windowsHostProcess",
    "baseline",
    (VersionedCheck(v1(0), check_host_process),),
)
