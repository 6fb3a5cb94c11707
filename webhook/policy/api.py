"""The contract between the mutation path and the policy gate (implemented in webhook.policy.gate).

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
    # Profile to inject; None means inject nothing (mode skip) or deny (when allowed is False).
    profile: str | None
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
    """No gate: used by offline `inject` (nothing to ask) and when no policy is configured."""

    def __init__(
        self, grant: str = "no-policy", clock: Callable[[], dt.datetime] | None = None
    ) -> None:
        self._grant = grant
        self._clock = clock  # when given, the admission's time (the session's start)

    def evaluate(self, request: PolicyRequest) -> PolicyResult:
        return PolicyResult(
            profile=request.requested_profile.name,
            allowed=True,
            reason="no-policy",
            message=f"profile {request.requested_profile.name!r} injected (no policy configured)",
            grant=self._grant,
            image=request.requested_image,
            started=self._clock() if self._clock else None,
        )

    def namespace_mode(self, namespace: str) -> str | None:
        return None
