"""The privilege rule, once: a debug profile needs an RBAC grant exactly when its toolset goes
beyond the Pod Security Standards' baseline level.

It is computed by the guard's own checks (webhook.guard.pss) on the sidecar as built: a pod of
one container with the profile's securityContext and the profile's hostPath volumes mounted.
Everything baseline refuses is a reason: privileged, capabilities beyond baseline's list
(compared as written: `CAP_SYS_ADMIN` and `sys_admin` are beyond it), hostPath volumes, seccomp
and AppArmor other than RuntimeDefault/Localhost, SELinux types other than the container types
or any user/role, an unmasked /proc, Windows host processes, and whatever a container or the
pod could add (host ports, probe hosts, host namespaces, sysctls). Nothing is declared: a
profile cannot be marked "safe" by mistake, and what the guard exempts for a granted toolset is
what the grant covers. The ephemeral-container gate asks the same checks which profile covers
a container (`beyond`). The chart's copy (templates/_helpers.tpl `privilegedProfiles`) must
agree; tests/chart/test_chart_privilege.py compares the two. A profile (webhook.profiles) is data:
whether it needs a grant is asked here (`profile_reasons`, `requires_grant`).
"""

from __future__ import annotations

import json
import weakref
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from webhook.guard import pss
from webhook.profiles import Profile

# How a reason names each check, then the offending values ("capabilities BPF, SYS_ADMIN"), in
# this order (the first four as the webhook has always listed them).
_LABELS = {
    "privileged": "privileged container",
    "capabilities_baseline": "capabilities",
    "hostPathVolumes": "hostPath",
    "seccompProfile_baseline": "seccomp",
    "appArmorProfile": "AppArmor",
    "seLinuxOptions": "SELinux",
    "procMount": "procMount",
    "windowsHostProcess": "Windows hostProcess",
    "hostPorts": "hostPort",
    "hostNamespaces": "host namespaces",
    "sysctls": "sysctls",
    "hostProbesAndHostLifecycle": "probe or lifecycle host",
    pss.MALFORMED: "invalid",
}
_ORDER = {check: index for index, check in enumerate(_LABELS)}
_NO_VALUES = frozenset({"privileged", "windowsHostProcess"})
CONTAINER = "toolset"


def sidecar_pod(
    security_context: Mapping[str, Any],
    host_paths: Sequence[str],
    name: str = CONTAINER,
    volume_names: Sequence[str] = (),
) -> dict[str, Any]:
    """The part of the sidecar as built that Pod Security reads: its securityContext and the
    profile's hostPath volumes (named `volume_names`, else host-path-N), mounted read-only."""
    names = list(volume_names) or [f"host-path-{i}" for i in range(len(host_paths))]
    return {
        "metadata": {"name": name},
        "spec": {
            "containers": [
                {
                    "name": name,
                    "image": CONTAINER,
                    "securityContext": security_context,
                    "volumeMounts": [
                        {"name": n, "mountPath": p, "readOnly": True}
                        for n, p in zip(names, host_paths, strict=True)
                    ],
                }
            ],
            "volumes": [
                {"name": n, "hostPath": {"path": p}} for n, p in zip(names, host_paths, strict=True)
            ],
        },
    }


def _value(violation: pss.Violation) -> str:
    """The offending value as a reason lists it (`SYS_ADMIN`, `/lib/modules`, `type spc_t`),
    or for a field of the wrong shape, the field (`securityContext.capabilities`)."""
    if violation.check == pss.MALFORMED:
        return violation.field.removeprefix("spec.containers[0].")
    try:
        value = json.loads(violation.value) if violation.value else ""
    except ValueError:
        value = violation.value
    if value is None:  # a field that must be set and is not
        return ""
    text = value if isinstance(value, str) else violation.value
    if violation.check == "seLinuxOptions":
        text = f"{violation.field.rsplit('.', 1)[-1]} {text}"
    return text


def reasons(violations: Sequence[pss.Violation]) -> tuple[str, ...]:
    """One reason per failed check, in the checks' order: its label and the values found."""
    found: dict[str, list[str]] = {}
    for violation in violations:
        values = found.setdefault(violation.check, [])
        if violation.check not in _NO_VALUES:
            value = _value(violation)
            if value and value not in values:
                values.append(value)
    return tuple(
        (
            _LABELS.get(check, check)
            + (
                " " + ", ".join(sorted(values) if check == "capabilities_baseline" else values)
                if values
                else ""
            )
        ).strip()
        for check, values in sorted(found.items(), key=lambda item: _ORDER.get(item[0], 99))
    )


def privilege_reasons(
    security_context: Mapping[str, Any], host_paths: Sequence[str]
) -> tuple[str, ...]:
    """Why a toolset with this securityContext and these hostPath mounts needs an RBAC grant:
    what Pod Security `baseline` refuses in it. Empty when it stays within baseline."""
    return reasons(_baseline(security_context, host_paths))


# A profile's reasons, computed once per Profile object: the policy gate asks for every profile on
# every review, and a profile never changes after start-up. Keyed by id (a Profile holds a dict,
# so it is not hashable); an entry goes when its profile does.
_PROFILE_REASONS: dict[int, tuple[str, ...]] = {}


def profile_reasons(profile: Profile) -> tuple[str, ...]:
    """Why this profile needs an RBAC grant; empty when it is within Pod Security baseline."""
    key = id(profile)
    found = _PROFILE_REASONS.get(key)
    if found is None:
        paths = tuple(h.path for h in profile.host_paths)
        found = privilege_reasons(profile.security_context, paths)
        _PROFILE_REASONS[key] = found
        weakref.finalize(profile, _PROFILE_REASONS.pop, key, None)
    return found


def requires_grant(profile: Profile) -> bool:
    """Whether injecting this profile's toolset is a privilege grant (an RBAC grant needed)."""
    return bool(profile_reasons(profile))


def strongest_unprivileged(profiles: Iterable[Profile]) -> Profile | None:
    """The strongest of `profiles` that needs no grant: most techniques, then most shared
    volumes; ties keep the given (profiles file's) order. None when every one needs a grant.
    What `attach` uses without --profile (a plain attach never needs an RBAC grant) and what a
    policy rule without defaultProfile downgrades to (among the profiles it allows)."""
    candidates = [p for p in profiles if not requires_grant(p)]
    if not candidates:
        return None
    return max(candidates, key=lambda p: (len(p.techniques), len(p.shared_volumes)))


def _baseline(
    security_context: Mapping[str, Any], host_paths: Sequence[str]
) -> list[pss.Violation]:
    return pss.check_pod(sidecar_pod(security_context, host_paths), "baseline")


def beyond(
    security_context: Mapping[str, Any],
    host_paths: Sequence[str],
    granted_context: Mapping[str, Any],
    granted_paths: Sequence[str],
) -> tuple[str, ...]:
    """What a container with this securityContext and these hostPath mounts asks for beyond a
    toolset with the granted ones (a profile's), by the same checks: each of its baseline
    violations the granted toolset does not have too, same check and same value (`CAP_SYS_ADMIN`
    is not `SYS_ADMIN`, `spc_t` is no seccomp setting). A privileged grant covers everything
    a container can ask for: a privileged container is root on the node already."""
    granted = _baseline(granted_context, granted_paths)
    if any(v.check == "privileged" for v in granted):
        return ()
    held = {(v.check, _value(v)) for v in granted}
    return reasons(
        [v for v in _baseline(security_context, host_paths) if (v.check, _value(v)) not in held]
    )


def extent(security_context: Mapping[str, Any], host_paths: Sequence[str]) -> tuple[bool, int]:
    """How much a grant of this toolset gives, for choosing the least of several: privileged
    last, then by the number of fields beyond baseline."""
    found = _baseline(security_context, host_paths)
    return any(v.check == "privileged" for v in found), len(found)


def pod_security_refusal(
    security_context: Mapping[str, Any], host_paths: Mapping[str, str], level: str, container: str
) -> str:
    """Pod Security's own message when a namespace enforcing `level` would reject a toolset
    container named `container` with this securityContext and these hostPath volumes (name:
    path) mounted (`violates PodSecurity "restricted:latest (v1.37)": runAsUser=0 (...)`);
    empty when it would not, and for `privileged`, an unknown or empty level."""
    chosen = next((known for known in pss.LEVELS if known == level), None)
    if chosen is None:
        return ""
    pod = sidecar_pod(security_context, list(host_paths.values()), container, list(host_paths))
    result = pss.evaluate(pod, chosen)
    return "" if result.allowed else result.message()
