"""runAsUser (restricted): never user 0."""

from __future__ import annotations

from typing import Any, Final

from webhook.guard.pss.checks import Check, VersionedCheck
from webhook.guard.pss.messages import quote, shown
from webhook.guard.pss.model import Finding, Violation, finding, setters, violation
from webhook.guard.pss.pod import PodView
from webhook.guard.pss.version import v1


def check_run_as_user(pod: PodView) -> Finding | None:
    if pod.user_namespace:  # 1.35: root in a user namespace is not root on the node
        return None
    return check_run_as_user_1_23(pod)


def check_run_as_user_1_23(pod: PodView) -> Finding | None:
    check, reason = "runAsUser", "runAsUser=0"
    found: list[Violation] = []

    def root(value: Any) -> bool:
        # 0, or anything the API would not take as a user ID (fail closed)
        return value is not None and not (type(value) is int and value != 0)

    value = pod.security.get("runAsUser")
    if root(value):
        text = f"pod must not set runAsUser={shown(value)}"
        found.append(violation(check, reason, "spec.securityContext.runAsUser", text, value, None))
    for c in pod.containers:
        value = c.security.get("runAsUser")
        if root(value):
            text = f"container {quote(c.ref.name)} must not set runAsUser={shown(value)}"
            path = f"{c.ref.path}.securityContext.runAsUser"
            found.append(violation(check, reason, path, text, value, c.ref))
    pod_set = any(v.container is None for v in found)
    refs = [v.container for v in found if v.container]
    detail = f"{setters(pod_set, refs)} must not set runAsUser=0"
    return finding(check, reason, detail, found)


CHECK: Final = Check(
    "runAsUser",
    "restricted",
    (
        VersionedCheck(v1(23), check_run_as_user_1_23),
        VersionedCheck(v1(35), check_run_as_user),
    ),
)
