"""The policy model: rules, their settings, label selectors and durations (pure data)."""

from __future__ import annotations

import datetime as dt
import fnmatch
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from webhook.policy.api import Mode
from webhook.wire import constants

_DURATION = re.compile(r"([0-9]+)([dhms])")


_UNIT_SECONDS = {"d": 86400, "h": 3600, "m": 60, "s": 1}
# Schedules: a rule that says nothing allows recordings of up to 10 minutes at up to 1000 Hz.
DEFAULT_MAX_SCHEDULE_SECONDS: Final = 600
DEFAULT_MAX_SCHEDULE_FREQUENCY: Final = 1000
MAX_SCHEDULE_SECONDS: Final = 3600

# Who must hold the RBAC grant for a profile that needs one (setting grantSubject):
# either: the pod's service account or the requesting user (today's default, the
#   PodSecurityPolicy model); serviceAccount: only the pod's service account; user: only the
#   requesting user (pods made by controllers never get privilege); both: the two together.
GrantSubject = Literal["either", "serviceAccount", "user", "both"]
GRANT_SUBJECTS: Final[tuple[GrantSubject, ...]] = ("either", "serviceAccount", "user", "both")
DEFAULT_GRANT_SUBJECT: Final[GrantSubject] = "either"


@dataclass(frozen=True)
class Identities:
    """Requesters that never grant (setting nonGrantingIdentities): usernames and groups as globs
    (`*`, `?`, `[...]`). They create pods on someone else's behalf; if their grant counted,
    everyone who may create a Deployment (or a Workflow) would get privileged sidecars."""

    users: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()

    def match(self, user: Mapping[str, Any]) -> str | None:
        """The entry that `user` matches (`user <glob>` / `group <glob>`), or None."""
        name = user.get("username")
        name = name if isinstance(name, str) else ""
        for pattern in self.users:
            if fnmatch.fnmatchcase(name, pattern):
                return f"user {pattern}"
        raw = user.get("groups")
        groups = [g for g in raw if isinstance(g, str)] if isinstance(raw, list) else []
        for pattern in self.groups:
            if any(fnmatch.fnmatchcase(group, pattern) for group in groups):
                return f"group {pattern}"
        return None


# The control plane's own identities, kube-system's controllers (replicaset-controller,
# job-controller, ...) and nodes: the built-in nonGrantingIdentities.
BUILTIN_NON_GRANTING: Final = Identities(
    users=(
        "system:kube-controller-manager",
        "system:kube-scheduler",
        "system:apiserver",
        "system:kube-proxy",
        "system:serviceaccount:kube-system:*",
        "system:node:*",
    ),
    groups=("system:nodes",),
)


def duration_seconds(text: str) -> int:
    """'8h', '90m', '1h30m', '2d' -> seconds, as an int (never overflows: compare it with a
    limit before making a timedelta of it)."""
    return sum(int(n) * _UNIT_SECONDS[u] for n, u in _DURATION.findall(text))


def parse_duration(text: str) -> dt.timedelta:
    """'8h', '90m', '1h30m', '2d' -> timedelta (the schema has already checked the shape)."""
    return dt.timedelta(seconds=duration_seconds(text))


def format_duration(delta: dt.timedelta) -> str:
    seconds, text = int(delta.total_seconds()), ""
    for unit, size in _UNIT_SECONDS.items():
        if seconds >= size:
            text += f"{seconds // size}{unit}"
            seconds %= size
    return text or "0s"


@dataclass(frozen=True)
class LabelSelector:
    match_labels: Mapping[str, str] = field(default_factory=dict)
    # (key, operator, values)
    match_expressions: tuple[tuple[str, str, frozenset[str]], ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        if any(labels.get(k) != v for k, v in self.match_labels.items()):
            return False
        for key, operator, values in self.match_expressions:
            present = key in labels
            if operator == "In" and not (present and labels[key] in values):
                return False
            if operator == "NotIn" and present and labels[key] in values:
                return False
            if operator == "Exists" and not present:
                return False
            if operator == "DoesNotExist" and present:
                return False
        return True

    def describe(self) -> str:
        parts = [f"{k}={v}" for k, v in self.match_labels.items()]
        for key, operator, values in self.match_expressions:
            if operator in ("In", "NotIn"):
                parts.append(f"{key} {operator.lower()} ({','.join(sorted(values))})")
            else:
                parts.append(key if operator == "Exists" else f"!{key}")
        return ", ".join(parts) or "(everything)"


@dataclass(frozen=True)
class RuleSettings:
    """What a rule (or the defaults) allows; a rule inherits every field it omits."""

    allowed_profiles: frozenset[str] = frozenset({"*"})
    default_profile: str | None = None
    mode: Mode = "downgrade"
    allowed_images: tuple[str, ...] = ()
    max_session: dt.timedelta | None = None
    # What `sidecar-debug controller` does with a session past max_session (report, evict, stop).
    on_expiry: str = constants.ON_EXPIRY_REPORT
    # What a sidecar-debug.io/schedule annotation may ask for (the results service refuses the
    # rest, the controller reports it): the longest recording and the highest sampling rate.
    max_schedule_seconds: int = DEFAULT_MAX_SCHEDULE_SECONDS
    max_schedule_frequency: int = DEFAULT_MAX_SCHEDULE_FREQUENCY
    # Who must hold the grant for a profile that needs one, and who never grants.
    grant_subject: GrantSubject = DEFAULT_GRANT_SUBJECT
    non_granting: Identities = BUILTIN_NON_GRANTING
    # The Pod Security level the guard enforces in guarded namespaces this rule covers; the
    # stricter of it, the setting and the namespace's guard label applies. None: the setting's.
    guard_level: str | None = None

    def allows_profile(self, name: str) -> bool:
        return "*" in self.allowed_profiles or name in self.allowed_profiles

    def allows_image(self, image: str) -> bool:
        return any(fnmatch.fnmatchcase(image, pattern) for pattern in self.allowed_images)

    def describe_profiles(self) -> str:
        if "*" in self.allowed_profiles:
            return "every profile"
        return ", ".join(sorted(self.allowed_profiles)) or "no profile"


@dataclass(frozen=True)
class Rule:
    name: str
    where: str  # "file:line" of the rule, for messages and `policy explain`
    settings: RuleSettings
    namespaces: tuple[str, ...] = ()
    service_accounts: tuple[str, ...] = ()
    namespace_selector: LabelSelector | None = None


@dataclass(frozen=True)
class Policy:
    rules: tuple[Rule, ...]
    defaults: RuleSettings
    defaults_where: str
    sources: tuple[str, ...]
