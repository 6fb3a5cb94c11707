"""The registry of checks, as Pod Security admission's `policy/registry.go` keeps it: every check
module registers one `CHECK`; the registry validates the IDs once, at import (unique, named as PSA
names them, overriding only baseline checks that exist), and evaluates a level."""

from __future__ import annotations

import functools
import importlib
import pkgutil
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Final

from webhook.guard.pss.checks import Check, CheckFn
from webhook.guard.pss.model import (
    LEVELS,
    MALFORMED,
    NO_EXEMPTION,
    Exemption,
    Finding,
    Level,
    PodSecurityResult,
    Violation,
)
from webhook.guard.pss.pod import read_pod
from webhook.guard.pss.version import LATEST, PolicyVersion, Version, parse_version

_ID: Final = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")


def validated(checks: Iterable[Check]) -> tuple[Check, ...]:
    """`checks` sorted by ID (the order in which Pod Security admission reports them), after
    the registry's rules: IDs are identifiers and unique, the level is known, and a check
    overrides only baseline checks that are registered (restricted replaces; baseline never
    does). A broken registration raises at import: the guard never runs on a partial list."""
    found: dict[str, Check] = {}
    for check in checks:
        if not _ID.match(check.id) or check.id == MALFORMED:
            raise ValueError(f"check ID {check.id!r} is not a Pod Security check ID")
        if check.id in found:
            raise ValueError(f"check ID {check.id!r} is registered twice")
        if check.level not in LEVELS:
            raise ValueError(f"check {check.id!r} has unknown level {check.level!r}")
        if not check.versions:
            raise ValueError(f"check {check.id!r} has no version")
        minimums = [v.minimum for v in check.versions]
        if any(a >= b for a, b in zip(minimums, minimums[1:], strict=False)):
            raise ValueError(f"check {check.id!r}: versions must be strictly increasing")
        found[check.id] = check
    for check in found.values():
        for overridden in check.overrides:
            target = found.get(overridden)
            if target is None:
                raise ValueError(f"check {check.id!r} overrides unknown check {overridden!r}")
            if check.level != "restricted" or target.level != "baseline":
                raise ValueError(
                    f"check {check.id!r} ({check.level}) may not override {overridden!r} "
                    f"({target.level}): only restricted checks replace baseline ones"
                )
    return tuple(sorted(found.values(), key=lambda c: c.id))


def _registered() -> Iterable[Check]:
    """The CHECK of every `check_*` module of this package (a new check module is registered
    by being there, as PSA's `init()` registrations)."""
    for module in pkgutil.iter_modules([str(Path(__file__).parent)]):
        if module.name.startswith("check_"):
            check = importlib.import_module(f"{__package__}.{module.name}").CHECK
            if not isinstance(check, Check):
                raise ValueError(f"{module.name}.CHECK is not a Check")
            yield check


CHECKS: Final[tuple[Check, ...]] = validated(_registered())


# The newest policy version of any check: `latest`, and every newer version, apply it (as PSA's
# registry clamps to its maxVersion).
NEWEST: Final[Version] = max(v.minimum for c in CHECKS for v in c.versions)


def resolve(version: str | Version | None = LATEST) -> PolicyVersion:
    """The policy version to apply for `version` (`latest`, `v1.N`, a Version, or None for
    latest). An invalid value is read as latest, as Pod Security admission reads an invalid
    `enforce-version` label (fail closed: the newest checks are the strictest), and the result
    says what was wrong."""
    if isinstance(version, Version):
        requested: Version | None = version
    elif version is None:
        requested = None
    else:
        try:
            requested = parse_version(version)
        except ValueError as exc:
            return PolicyVersion(None, NEWEST, f"{exc}; read as {LATEST}, as Pod Security does")
    applied = NEWEST if requested is None or requested > NEWEST else requested
    return PolicyVersion(requested, applied)


@functools.cache
def checks_for(level: Level, version: Version = NEWEST) -> tuple[tuple[Check, CheckFn], ...]:
    """The checks of `level` at policy `version`, each with the implementation in force then:
    baseline's, or restricted's with the baseline checks it replaces left out (only where the
    restricted check applies at that version, as PSA's per-version overrides). Computed once
    per level and version, as PSA's registry inflates its per-version lists."""
    chosen = [
        (c, run)
        for c in CHECKS
        if c.level == "baseline" or level == "restricted"
        if (run := c.at(version)) is not None
    ]
    replaced = {o for c, _ in chosen for o in c.overrides}
    return tuple((c, run) for c, run in chosen if c.id not in replaced)


def evaluate(
    pod: Any,
    level: Level,
    exempt: Exemption = NO_EXEMPTION,
    version: str | Version | PolicyVersion | None = LATEST,
) -> PodSecurityResult:
    """Every check of `level` at `version` (default latest) on `pod` (a Pod's plain data, any
    shape: never raises for the pod)."""
    if level not in LEVELS:
        raise ValueError(f"level must be one of {', '.join(LEVELS)}, got {level!r}")
    policy = version if isinstance(version, PolicyVersion) else resolve(version)
    view = read_pod(pod, exempt)
    findings = [
        f for f in (run(view) for _, run in checks_for(level, policy.applied)) if f is not None
    ]
    if view.malformed:
        # Recorded as the checks read the fields (two checks may read the same one).
        malformed = tuple({v.field: v for v in view.malformed}.values())
        detail = "; ".join(v.message for v in malformed[:3])
        detail += f"; and {len(malformed) - 3} more" if len(malformed) > 3 else ""
        findings.insert(0, Finding(MALFORMED, "invalid pod", detail, malformed))
    return PodSecurityResult(level, tuple(findings), policy)


def check_pod(
    pod: Any,
    level: Level,
    exempt: Exemption = NO_EXEMPTION,
    version: str | Version | PolicyVersion | None = LATEST,
) -> list[Violation]:
    """The violations of `pod` at `level` and `version`: empty when Pod Security admission
    would admit it."""
    return evaluate(pod, level, exempt, version).violations
