"""A check as the registry holds it (Pod Security admission's `policy/checks.go`): its ID, its
level, its version history (each `VersionedCheck` applies from its minimum version until the
next one's), and the checks of the lower level it replaces while it applies."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from webhook.guard.pss.model import Finding, Level
from webhook.guard.pss.pod import PodView
from webhook.guard.pss.version import Version

CheckFn = Callable[[PodView], Finding | None]


@dataclass(frozen=True)
class VersionedCheck:
    minimum: Version
    run: CheckFn


@dataclass(frozen=True)
class Check:
    id: str
    level: Level
    versions: tuple[VersionedCheck, ...]
    overrides: tuple[str, ...] = ()

    def at(self, version: Version) -> CheckFn | None:
        """The implementation in force at `version`; None before the check existed."""
        chosen = None
        for versioned in self.versions:
            if versioned.minimum <= version:
                chosen = versioned.run
        return chosen
