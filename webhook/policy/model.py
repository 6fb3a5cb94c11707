"""The policy model: rules, their settings, label selectors and durations (pure data)."""

from __future__ import annotations

import datetime as dt
import fnmatch
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from webhook import constants
from webhook.policy.api import Mode

_DURATION = re.compile(r"([0-9]+)([dhms])")


_UNIT_SECONDS = {"d": 86400, "h": 3600, "m": 60, "s": 1}


def parse_duration(text: str) -> dt.timedelta:
    """'8h', '90m', '1h30m', '2d' -> timedelta (the schema has already checked the shape)."""
    return dt.timedelta(seconds=sum(int(n) * _UNIT_SECONDS[u] for n, u in _DURATION.findall(text)))


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
