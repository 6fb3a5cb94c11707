"""Policy versions, as Pod Security admission names them: `latest` or `v1.N`
(pod-security-admission's `api.ParseVersion`; `v1.0` is the first, Kubernetes 1.N's checks are
`v1.N`). The namespace label `pod-security.kubernetes.io/enforce-version` and `guard check
--version` take them; an invalid value is read as `latest`, as Pod Security admission does
(fail closed: the newest checks are the strictest), and said."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

_PATTERN: Final = re.compile(r"^v1\.(0|[1-9][0-9]{0,8})$")
LATEST: Final = "latest"


@dataclass(frozen=True, order=True)
class Version:
    """A policy version `v1.<minor>` (Kubernetes has had only major version 1)."""

    minor: int

    def __str__(self) -> str:
        return f"v1.{self.minor}"


def v1(minor: int) -> Version:
    return Version(minor)


@dataclass(frozen=True)
class PolicyVersion:
    """What was asked for (`latest`, or a version) and the version of the checks applied (the
    newest the guard knows, for `latest` and for a version newer than that)."""

    requested: Version | None  # None: latest
    applied: Version
    problem: str = ""  # an invalid value read as latest: what was wrong

    def label(self) -> str:
        """`v1.20`, `latest (v1.37)`, or `v1.40 (v1.37)` when the checks applied are older."""
        if self.requested is None:
            return f"{LATEST} ({self.applied})"
        if self.requested != self.applied:
            return f"{self.requested} ({self.applied})"
        return str(self.requested)


def parse_version(text: object) -> Version | None:
    """`latest` -> None, `v1.N` -> Version(N); anything else raises ValueError with the reason."""
    if text == LATEST:
        return None
    match = _PATTERN.match(text) if isinstance(text, str) else None
    if match is None:
        raise ValueError(
            f"{text!r} is not a Pod Security version: use {LATEST!r} or v1.N (e.g. v1.30)"
        )
    return Version(int(match.group(1)))
