"""appArmorProfile (baseline): AppArmor fields and annotations name the runtime default or a
local profile."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from webhook.guard.pss.checks import Check, VersionedCheck
from webhook.guard.pss.messages import as_text, join_quote, plural, quote, shown
from webhook.guard.pss.model import Finding, Violation, finding, setters, unique, violation
from webhook.guard.pss.pod import PodView, annotation_path, written_for_exempted
from webhook.guard.pss.version import v1

APPARMOR_TYPES: Final = frozenset({"RuntimeDefault", "Localhost"})
APPARMOR_ANNOTATION_PREFIX: Final = "container.apparmor.security.beta.kubernetes.io/"


def check_app_armor(pod: PodView) -> Finding | None:
    check = "appArmorProfile"
    found: list[Violation] = []
    types: set[str] = set()
    pod_set = False

    def bad_type(profile: Mapping[str, Any]) -> Any:
        value = profile.get("type")
        return None if isinstance(value, str) and value in APPARMOR_TYPES else value

    where = "spec.securityContext.appArmorProfile"
    if pod.security.get("appArmorProfile") is not None:
        profile = pod.mapping(pod.security.get("appArmorProfile"), where)
        value = bad_type(profile)
        if value is not None or "type" not in profile:
            pod_set = True
            types.add(as_text(value if value is not None else ""))
            text = f"pod must not set AppArmor profile type to {shown(value or '')}"
            found.append(violation(check, "", f"{where}.type", text, value or "", None))
    for c in pod.containers:
        where = f"{c.ref.path}.securityContext.appArmorProfile"
        if c.security.get("appArmorProfile") is None:
            continue
        profile = pod.mapping(c.security.get("appArmorProfile"), where)
        value = bad_type(profile)
        if value is not None or "type" not in profile:
            types.add(as_text(value if value is not None else ""))
            text = (
                f"container {quote(c.ref.name)} must not set AppArmor profile type to "
                f"{shown(value or '')}"
            )
            found.append(violation(check, "", f"{where}.type", text, value or "", c.ref))
    annotations: list[str] = []
    for key, value in pod.annotations.items():
        if not (isinstance(key, str) and key.startswith(APPARMOR_ANNOTATION_PREFIX)):
            continue
        if isinstance(value, str) and (
            value in ("", "runtime/default") or value.startswith("localhost/")
        ):
            continue
        if written_for_exempted(pod, key, APPARMOR_ANNOTATION_PREFIX, "appArmorProfile", value):
            continue
        annotations.append(f"{key}={shown(value)}")
        text = f"annotation {quote(key)} must not set AppArmor profile {shown(value)}"
        found.append(violation(check, "", annotation_path(key), text, value, None))
    refs = unique(v.container for v in found if v.container)
    more = [plural("annotation", "annotations", len(annotations))] if annotations else []
    values = sorted(types) + sorted(annotations)
    reason = plural("forbidden AppArmor profile", "forbidden AppArmor profiles", len(values))
    found = [Violation(v.check, reason, v.field, v.message, v.value, v.container) for v in found]
    detail = (
        f"{setters(pod_set, refs, more)} must not set AppArmor profile type to {join_quote(values)}"
    )
    return finding(check, reason, detail, found)


CHECK: Final = Check(
    "appArmorProfile",
    "baseline",
    (VersionedCheck(v1(0), check_app_armor),),
)
