"""The contract between the mutation path and the policy gate (webhook.policy.decision).

The mutation path asks one question: may this pod get `requested_profile`, and if not, what
instead? The answer is data, so the decision stays testable and auditable.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal, Protocol

from webhook.profiles import Profile
from webhook.wire import constants
from webhook.wire.identity import UserInfo

# What a policy does when the gate says no to the requested profile.
Mode = Literal["downgrade", "skip", "deny"]


@dataclass(frozen=True)
class PolicyRequest:
    namespace: str
    service_account: str  # "default" when the pod names none
    user: UserInfo  # the requester (for pods made by controllers, the controller's identity)
    requested_profile: Profile
    requested_image: str | None  # from the toolset-image annotation; None = the configured image
    dry_run: bool = False
    # Set for an ephemeral container added to a running pod (webhook.admission.ephemeral): only
    # the requester's grant counts (the pod's service account did not ask for it), and every
    # refusal denies (an ephemeral container cannot be downgraded or left out).
    ephemeral_container: str | None = None
    # standby: only the inert wiring is added (no container, nothing privileged), so no grant
    # is needed; the toolset is gated when `attach` adds it.
    mode: str = constants.MODE_INJECTED


@dataclass(frozen=True)
class PolicyResult:
    # Profile to inject (one of the settings' profiles); None means inject nothing (mode skip)
    # or deny (when allowed is False).
    profile: Profile | None
    allowed: bool  # False rejects the pod (mode deny)
    reason: str  # short machine-readable code for logs, metrics and audit, e.g. "granted-sa"
    message: str  # for the person who created the pod: what happened, why, what to do
    grant: str  # who or what granted the profile: "unprivileged", "serviceaccount:NS:SA", ...
    image: str | None = None  # toolset image to use; None = the configured image
    annotations: Mapping[str, str] = field(default_factory=dict)  # extra pod annotations
    warnings: tuple[str, ...] = ()  # surfaced to kubectl users as admission warnings
    # The session's facts for the toolset's env (webhook.inject.sidecar.session_env): when the
    # webhook admitted it and when it must end (the rule's maxSessionDuration). None: no
    # admission (offline inject) or no limit.
    started: dt.datetime | None = None
    deadline: dt.datetime | None = None


class PolicyEngine(Protocol):
    def evaluate(self, request: PolicyRequest) -> PolicyResult: ...

    def namespace_mode(self, namespace: str) -> str | None:
        """The namespace's default mode (label sidecar-debug.io/mode), None when it has none
        or it cannot be read."""
        ...


class AllowAll:
    """The one no-op engine: the requested profile, always allowed; no cluster is asked and no
    namespace has a default mode (the pod's annotation or the settings' defaultMode apply).

    Offline `sidecar-debug inject` (webhook.inject.workloads) uses `AllowAll.offline()`: grant
    "offline", reason "offline-inject", always the configured toolset image (no policy allows
    another) and no session start (nothing admitted the pod). `AllowAll()` is for a Mutator
    given no policy (tests and benches; the server always loads the policy gate, with the
    built-in policy when none is configured): reason "no-policy", the requested image, and the
    session's start from `clock` when given."""

    def __init__(
        self,
        grant: str = "no-policy",
        clock: Callable[[], dt.datetime] | None = None,
        *,
        reason: str = "no-policy",
        how: str = "(no policy configured)",
        requested_image: bool = True,
    ) -> None:
        self._grant = grant
        self._clock = clock  # when given, the admission's time (the session's start)
        self._reason = reason
        self._how = how  # ends the message: "profile 'perf' injected <how>"
        self._requested_image = requested_image  # False: always the configured image

    @classmethod
    def offline(cls) -> AllowAll:
        """Offline `inject`: nothing to ask, the requested profile, the configured image."""
        return cls("offline", reason="offline-inject", how="offline", requested_image=False)

    def evaluate(self, request: PolicyRequest) -> PolicyResult:
        return PolicyResult(
            profile=request.requested_profile,
            allowed=True,
            reason=self._reason,
            message=f"profile {request.requested_profile.name!r} injected {self._how}",
            grant=self._grant,
            image=request.requested_image if self._requested_image else None,
            started=self._clock() if self._clock else None,
        )

    def namespace_mode(self, namespace: str) -> str | None:
        return None
