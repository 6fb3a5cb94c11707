"""What the checks find and what they are: levels, violations, findings, exemptions, the
result of a level, and a check's registration."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from webhook.guard.pss.messages import join_quote, plural, quote, shown
from webhook.guard.pss.version import PolicyVersion

Level = Literal["baseline", "restricted"]


LEVELS: Final[tuple[Level, ...]] = ("baseline", "restricted")


# Pod Security admission visits containers in this order; messages list them so.
CONTAINER_KINDS: Final = ("initContainers", "containers", "ephemeralContainers")


MALFORMED: Final = "malformed"  # not a PSA check: a shape the API refuses, reported fail-closed


@dataclass(frozen=True)
class ContainerRef:
    """One container of the pod: its list (`containers`, `initContainers`,
    `ephemeralContainers`), name and index in that list."""

    kind: str
    name: str
    index: int

    @property
    def path(self) -> str:
        return f"spec.{self.kind}[{self.index}]"

    def __str__(self) -> str:
        kind = {"initContainers": "init container", "ephemeralContainers": "ephemeral container"}
        return f"{kind.get(self.kind, 'container')} {quote(self.name)}"


@dataclass(frozen=True)
class Violation:
    """One field that breaks a check: the check's ID and Pod Security's reason, the field's
    path in the pod, a one-line message, the offending value as shown, and the container or
    volume it belongs to (None for pod-level fields and annotations)."""

    check: str
    reason: str
    field: str
    message: str
    value: str = ""
    container: ContainerRef | None = None
    volume: str | None = None


@dataclass(frozen=True)
class Finding:
    """A failed check, as Pod Security admission words it (`reason (detail)`), and its fields."""

    check: str
    reason: str
    detail: str
    violations: tuple[Violation, ...]

    def __str__(self) -> str:
        return f"{self.reason} ({self.detail})"


@dataclass(frozen=True)
class Exemption:
    """What the caller exempts: containers by (kind, name) and volumes by name. An exempted
    container is not checked at all, nor are the seccomp and AppArmor annotations Kubernetes
    writes from its own fields (1.19+ copies a container's seccompProfile into
    `container.seccomp.security.alpha.kubernetes.io/NAME`): an annotation that says anything
    else about it is still checked. An exempted volume passes the volume checks. Pod-level
    fields and the pod's annotations are always checked."""

    containers: frozenset[tuple[str, str]] = frozenset()
    volumes: frozenset[str] = frozenset()


NO_EXEMPTION: Final = Exemption()


@dataclass(frozen=True)
class PodSecurityResult:
    level: Level
    findings: tuple[Finding, ...]
    version: PolicyVersion

    @property
    def allowed(self) -> bool:
        return not self.findings

    @property
    def violations(self) -> list[Violation]:
        return [v for f in self.findings for v in f.violations]

    @property
    def policy(self) -> str:
        """The level and the version applied: `baseline:v1.20`, `restricted:latest (v1.37)`."""
        return f"{self.level}:{self.version.label()}"

    def message(self) -> str:
        """Pod Security admission's wording, with the version the checks applied, e.g.
        `violates PodSecurity "baseline:latest (v1.37)": host namespaces (hostNetwork=true),
        privileged (container "x" must not set ...)`."""
        found = ", ".join(str(f) for f in self.findings)
        return f'violates PodSecurity "{self.policy}": {found}'


def containers_phrase(refs: Sequence[ContainerRef]) -> str:
    """`container "a"` / `containers "a", "b"`, as PSA names them (every kind is a container)."""
    return f"{plural('container', 'containers', len(refs))} {join_quote(r.name for r in refs)}"


def setters(pod: bool, refs: Sequence[ContainerRef], more: Sequence[str] = ()) -> str:
    """`pod and containers "a", "b"`: who set a forbidden value."""
    parts = (["pod"] if pod else []) + ([containers_phrase(refs)] if refs else []) + list(more)
    return " and ".join(parts)


def unique(refs: Iterable[ContainerRef]) -> list[ContainerRef]:
    seen: dict[tuple[str, int], ContainerRef] = {}
    for ref in refs:
        seen.setdefault((ref.kind, ref.index), ref)
    return list(seen.values())


def finding(check: str, reason: str, detail: str, found: list[Violation]) -> Finding | None:
    return Finding(check, reason, detail, tuple(found)) if found else None


def violation(
    check: str, reason: str, path: str, message: str, value: Any, owner: ContainerRef | None
) -> Violation:
    return Violation(check, reason, path, message, shown(value), owner)
