"""The guard's decision, pure: Pod Security Standards on every container of a pod except
sidecar-debug's own toolset, and only when it is verified and its profile granted.

The webhook (/validate-pods) and offline `guard check` call `evaluate` with the same pod. What
is exempted is decided here and nowhere else:

- a container `webhook.guard.toolset` verifies as our toolset for profile P, when P needs no
  grant (it is within baseline by the one privilege rule) or `granted(P)` confirms the
  requester's grant (the webhook asks RBAC; offline there is no one to ask: `granted=None`
  exempts verified toolsets on their structure alone and says so in `unchecked`);
- the hostPath volumes of P that only such exempted containers mount.

Nothing else: pod-level fields (host namespaces, sysctls, the pod's securityContext), the
annotations, every other container and volume are checked at `level`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from webhook.config import Settings
from webhook.guard import pss
from webhook.guard.privilege import requires_grant
from webhook.guard.toolset import ImageAllowed, Toolset, verify_toolsets

Granted = Callable[[str], bool]


@dataclass(frozen=True)
class GuardResult:
    """What the guard found: `violations` deny the pod (empty: admit)."""

    level: pss.Level
    toolsets: tuple[Toolset, ...]  # verified as ours
    exempted: tuple[Toolset, ...]  # of those, the ones Pod Security does not apply to
    ungranted: tuple[Toolset, ...]  # verified, but `granted` said no: checked like any other
    unchecked: tuple[Toolset, ...]  # exempted offline without a grant check (granted=None)
    pod_security: pss.PodSecurityResult
    toolset_violations: tuple[pss.Violation, ...]

    @property
    def violations(self) -> list[pss.Violation]:
        return [*self.toolset_violations, *self.pod_security.violations]

    @property
    def allowed(self) -> bool:
        return not self.toolset_violations and self.pod_security.allowed

    def message(self) -> str:
        """One line for a denial: Pod Security's summary, then the toolset's problems."""
        parts = [] if self.pod_security.allowed else [self.pod_security.message()]
        parts += [v.message for v in self.toolset_violations]
        return "; ".join(parts)

    def notes(self) -> list[str]:
        """What a person should know besides the violations (offline: grants not checked;
        toolsets refused for lack of a grant)."""
        found = [
            f"{t.container} is the verified toolset of profile {pss.quote(t.profile)}; whether "
            "its creator holds that profile's grant cannot be checked offline (the webhook asks "
            "RBAC)"
            for t in self.unchecked
        ]
        found += [
            f"{t.container} is the verified toolset of profile {pss.quote(t.profile)}, but "
            "the grant is missing: it is checked like any container"
            for t in self.ungranted
        ]
        return found


def _users(pod: Any) -> dict[str, set[tuple[str, str]]]:
    """Volume name -> the containers (kind, name) that mount it or attach it as a device."""
    spec = pod.get("spec") if isinstance(pod, Mapping) else None
    users: dict[str, set[tuple[str, str]]] = {}
    for kind in pss.CONTAINER_KINDS:
        containers = spec.get(kind) if isinstance(spec, Mapping) else None
        for container in containers if isinstance(containers, list) else ():
            if not isinstance(container, Mapping):
                continue
            name = container.get("name")
            owner = (kind, name if isinstance(name, str) else pss.shown(name))
            for key in ("volumeMounts", "volumeDevices"):
                refs = container.get(key)
                for ref in refs if isinstance(refs, list) else ():
                    if isinstance(ref, Mapping):
                        users.setdefault(str(ref.get("name")), set()).add(owner)
    return users


def evaluate(
    pod: Any,
    settings: Settings,
    level: pss.Level,
    granted: Granted | None,
    image_allowed: ImageAllowed | None = None,
    version: pss.PolicyVersion | None = None,
) -> GuardResult:
    """The guard's verdict on `pod` at `level`. `granted(profile)` says whether the requester
    (or the pod's service account, as the policy's grant subject says) holds the grant of that
    profile; it is asked at most once per profile, only for verified toolsets whose profile
    needs a grant, and must answer False when it cannot tell (fail closed). None: offline, no
    grant check. `image_allowed` as in verify_toolsets. `version`: the Pod Security policy
    version to apply (default latest)."""
    report = verify_toolsets(pod, settings, image_allowed)
    answers: dict[str, bool] = {}
    exempted: list[Toolset] = []
    ungranted: list[Toolset] = []
    unchecked: list[Toolset] = []
    for toolset in report.toolsets:
        profile = settings.profiles[toolset.profile]
        if not requires_grant(profile):
            exempted.append(toolset)
        elif granted is None:
            exempted.append(toolset)
            unchecked.append(toolset)
        else:
            if toolset.profile not in answers:
                answers[toolset.profile] = bool(granted(toolset.profile))
            (exempted if answers[toolset.profile] else ungranted).append(toolset)
    containers = frozenset((t.container.kind, t.container.name) for t in exempted)
    users = _users(pod)
    volumes = frozenset(
        name for t in exempted for name in t.host_volumes if users.get(name, set()) <= containers
    )
    result = pss.evaluate(pod, level, pss.Exemption(containers, volumes), version)
    return GuardResult(
        level,
        report.toolsets,
        tuple(exempted),
        tuple(ungranted),
        tuple(unchecked),
        result,
        report.violations,
    )
