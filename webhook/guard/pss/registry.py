"""The registry of checks, as Pod Security admission's `policy/registry.go` keeps it: every check
module registers one `CHECK`; the registry validates the IDs once, at import (unique, named as PSA
names them, overriding only baseline checks that exist), and evaluates a level."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any, Final

from webhook.guard.pss import (
    check_allow_privilege_escalation,
    check_app_armor_profile,
    check_capabilities_baseline,
    check_capabilities_restricted,
    check_host_namespaces,
    check_host_path_volumes,
    check_host_ports,
    check_host_probes_and_host_lifecycle,
    check_privileged,
    check_proc_mount_baseline,
    check_proc_mount_restricted,
    check_restricted_volumes,
    check_run_as_non_root,
    check_run_as_user,
    check_se_linux_options,
    check_seccomp_profile_baseline,
    check_seccomp_profile_restricted,
    check_sysctls,
    check_windows_host_process,
)
from webhook.guard.pss.checks import Check
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


CHECKS: Final[tuple[Check, ...]] = validated(
    module.CHECK
    for module in (
        check_allow_privilege_escalation,
        check_app_armor_profile,
        check_capabilities_baseline,
        check_capabilities_restricted,
        check_host_namespaces,
        check_host_path_volumes,
        check_host_ports,
        check_host_probes_and_host_lifecycle,
        check_privileged,
        check_proc_mount_baseline,
        check_proc_mount_restricted,
        check_restricted_volumes,
        check_run_as_non_root,
        check_run_as_user,
        check_se_linux_options,
        check_seccomp_profile_baseline,
        check_seccomp_profile_restricted,
        check_sysctls,
        check_windows_host_process,
    )
)


def checks_for(level: Level) -> tuple[Check, ...]:
    """The checks of `level`: baseline's, or restricted's with those it replaces left out."""
    chosen = [c for c in CHECKS if c.level == "baseline" or level == "restricted"]
    replaced = {o for c in chosen for o in c.overrides}
    return tuple(c for c in chosen if c.id not in replaced)


def evaluate(pod: Any, level: Level, exempt: Exemption = NO_EXEMPTION) -> PodSecurityResult:
    """Every check of `level` on `pod` (a Pod's plain data, any shape: never raises)."""
    if level not in LEVELS:
        raise ValueError(f"level must be one of {', '.join(LEVELS)}, got {level!r}")
    view = read_pod(pod, exempt)
    findings = [f for f in (c.run(view) for c in checks_for(level)) if f is not None]
    if view.malformed:
        # Recorded as the checks read the fields (two checks may read the same one).
        malformed = tuple({v.field: v for v in view.malformed}.values())
        detail = "; ".join(v.message for v in malformed[:3])
        detail += f"; and {len(malformed) - 3} more" if len(malformed) > 3 else ""
        findings.insert(0, Finding(MALFORMED, "invalid pod", detail, malformed))
    return PodSecurityResult(level, tuple(findings))


def check_pod(pod: Any, level: Level, exempt: Exemption = NO_EXEMPTION) -> list[Violation]:
    """The violations of `pod` at `level`: empty when Pod Security admission would admit it."""
    return evaluate(pod, level, exempt).violations
