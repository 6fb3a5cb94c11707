"""A check as the registry holds it (Pod Security admission's `policy/checks.go`): its ID, its
level, the function that runs it on the pod as read, and the checks of the lower level it
replaces."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from webhook.guard.pss.model import Finding, Level
from webhook.guard.pss.pod import PodView

CheckFn = Callable[[PodView], Finding | None]


@dataclass(frozen=True)
class Check:
    id: str
    level: Level
    run: CheckFn
    overrides: tuple[str, ...] = ()
