"""The expiry pass: every debug session past its policy's maxSessionDuration gets the rule's
`onExpiry` action.

- `report`: a Warning Event `DebugSessionExpired` on the pod (once per session) and the
  metrics; nothing is removed.
- `evict`: the Eviction API (policy/v1beta1 before Kubernetes 1.22, policy/v1 from then), so
  PodDisruptionBudgets apply. A 429 (the budget allows no disruption now) is logged, counted
  `blocked`, reported once with a `DebugSessionEvictionBlocked` Event, and tried again next pass.
  A pod with an owner (ReplicaSet, StatefulSet, Job) comes back from its template; once the
  namespace or pod no longer opts in, without the sidecar. A bare pod is gone for good.
- `stop`: an attached (ephemeral) toolset ends itself at its deadline, which the webhook wrote
  into its env (SIDECAR_DEBUG_SESSION_DEADLINE; toolset/bin/toolset-entrypoint): the controller
  holds no `pods/exec` and does nothing to it. One still running STOP_GRACE after its expiry
  (written before the deadline existed, or the policy was tightened since) is reported once,
  saying how to end it. An injected sidecar cannot end itself (the kubelet restarts it): the
  session is reported, saying to use `evict`.

Calls: list pods (all namespaces), create pods/eviction, create events; the policy gate reads a
namespace's labels for rules with a namespaceSelector.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from webhook.controller import metrics
from webhook.controller.sessions import (
    ATTACHED,
    Session,
    expiry_of,
    is_active_pod,
    sessions_of,
)
from webhook.kube.api import ApiError, KubeApi
from webhook.kube.events import post_event
from webhook.policy.model import RuleSettings, format_duration
from webhook.wire import constants
from webhook.wire.rfc3339 import format_time

log = logging.getLogger(__name__)

COMPONENT = "sidecar-debug-controller"
EVICTION_V1_MINOR = 22  # policy/v1 Eviction from Kubernetes 1.22

# An attached toolset stops at its deadline and its status says so within seconds; only one
# still running this long after its expiry is reported.
STOP_GRACE = dt.timedelta(seconds=60)


class RuleSource(Protocol):
    def rule_for(self, namespace: str, service_account: str) -> tuple[RuleSettings, str]:
        """The rule's settings and where it is written; raises when it cannot be decided."""
        ...


@dataclass(frozen=True)
class Verdict:
    session: Session
    expires: dt.datetime | None
    overdue: bool
    rule: RuleSettings
    rule_where: str


@dataclass
class PassResult:
    verdicts: list[Verdict] = field(default_factory=list)
    actions: list[tuple[str, str, str]] = field(default_factory=list)  # (pod, action, result)
    skipped: list[str] = field(default_factory=list)  # pods whose rule could not be decided
    pods: list[dict[str, Any]] = field(default_factory=list)  # what the pass listed


def judge(sessions: Iterable[Session], rules: RuleSource, now: dt.datetime,
          skipped: list[str] | None = None) -> list[Verdict]:
    """Each session's expiry and whether it is overdue (pure but for the rule look-up)."""
    verdicts: list[Verdict] = []
    cache: dict[tuple[str, str], tuple[RuleSettings, str] | None] = {}
    for session in sessions:
        key = (session.namespace, session.service_account)
        if key not in cache:
            try:
                cache[key] = rules.rule_for(*key)
            except Exception as error:  # noqa: BLE001 - one undecidable namespace, not the pass
                log.warning("no expiry for namespace %s, service account %s this pass: %s",
                            *key, error)
                cache[key] = None
        found = cache[key]
        if found is None:
            if skipped is not None:
                skipped.append(f"{session.namespace}/{session.pod}")
            continue
        rule, where = found
        expires = expiry_of(session, rule.max_session)
        verdicts.append(Verdict(session, expires, expires is not None and now >= expires,
                                rule, where))
    return verdicts


class ExpiryPass:
    """One pass over the cluster's pods. `may_act()` is asked before every write: a replica
    that lost the Lease mid-pass stops there."""

    def __init__(self, api: KubeApi, rules: RuleSource, *, identity: str,
                 sidecar_name: str = constants.DEFAULT_SIDECAR_NAME,
                 may_act: Callable[[], bool] = lambda: True,
                 wall_clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC)) -> None:
        self.api = api
        self.rules = rules
        self.identity = identity
        self.sidecar_name = sidecar_name
        self.may_act = may_act
        self._now = wall_clock
        # Pods evicted by this replica: the list (from the watch cache) may show one without its
        # deletionTimestamp for a moment, and one eviction per pod is enough.
        self._evicted: set[str] = set()

    def list_pods(self) -> list[dict[str, Any]]:
        # resourceVersion=0: served from the apiserver's watch cache, cheap on a big cluster.
        answer = self.api.call("GET", "/api/v1/pods?resourceVersion=0")
        items = answer.get("items")
        return [p for p in items if isinstance(p, dict)] if isinstance(items, list) else []

    def run(self) -> PassResult:
        now = self._now()
        result = PassResult()
        sessions: list[Session] = []
        result.pods = self.list_pods()
        for pod in result.pods:
            if is_active_pod(pod):
                sessions += [s for s in sessions_of(pod)
                             if s.uid not in self._evicted]
        result.verdicts = judge(sessions, self.rules, now, result.skipped)
        self._count(result.verdicts)
        by_pod: dict[str, list[Verdict]] = {}
        for verdict in result.verdicts:
            if verdict.overdue:
                by_pod.setdefault(verdict.session.uid, []).append(verdict)
        for overdue in by_pod.values():
            if not self.may_act():
                log.info("not the leader any more: the pass stops here")
                break
            action = overdue[0].rule.on_expiry
            first = overdue[0].session
            where = f"{first.namespace}/{first.pod}"
            if action == constants.ON_EXPIRY_EVICT:
                result.actions.append((where, action, self._evict(overdue)))
            elif action == constants.ON_EXPIRY_STOP:
                result.actions += [(where, action, self._stop(v)) for v in overdue]
            else:
                result.actions += [(where, action, self._report(v)) for v in overdue]
        return result

    @staticmethod
    def _count(verdicts: list[Verdict]) -> None:
        counts: dict[tuple[str, str], int] = {}
        for verdict in verdicts:
            state = ("overdue" if verdict.overdue else
                     "active" if verdict.expires is not None else "unlimited")
            key = (verdict.session.kind, state)
            counts[key] = counts.get(key, 0) + 1
        metrics.SESSIONS.clear()
        for (kind, state), count in counts.items():
            metrics.SESSIONS.labels(kind=kind, state=state).set(count)

    # -- what the verdict says to do ----------------------------------------------------------

    def _why(self, verdict: Verdict) -> str:
        session, expires = verdict.session, verdict.expires or self._now()
        limit = (f"maxSessionDuration {format_duration(verdict.rule.max_session)}"
                 if verdict.rule.max_session is not None else "no maxSessionDuration")
        since = format_time(expires)
        if session.deadline is not None and session.deadline <= expires:
            since += f" (the deadline set at admission, {constants.ENV_SESSION_DEADLINE})"
        return (f"debug session {session.describe()} expired at {since}: {limit} of "
                f"{verdict.rule_where}, onExpiry {verdict.rule.on_expiry}")

    def _event(self, session: Session, reason: str, message: str, *, warning: bool,
               detail: str = "") -> str:
        """Create the Event: "created", "exists" (reported before) or "failed" (logged)."""
        involved = {"apiVersion": "v1", "kind": "Pod", "name": session.pod,
                    "namespace": session.namespace, "uid": session.uid}
        return post_event(self.api, involved, reason, message, warning=warning, detail=detail,
                          identity=self.identity, now=self._now(), component=COMPONENT)

    def _report(self, verdict: Verdict, *, action: str = constants.ON_EXPIRY_REPORT,
                result: str = "reported", extra: str = "") -> str:
        session = verdict.session
        message = self._why(verdict) + (extra or "; nothing was removed")
        created = self._event(session, "DebugSessionExpired", message, warning=True,
                              detail=session.container)
        if created == "exists":
            return "already-reported"  # by this replica or an earlier leader: nothing to do
        if created == "failed":
            result = "failed"  # no Event: tried again next pass
        metrics.ACTIONS.labels(action=action, result=result).inc()
        log.warning("%s/%s: %s", session.namespace, session.pod, message)
        return result

    def _evict(self, overdue: list[Verdict]) -> str:
        session = overdue[0].session
        where = f"{session.namespace}/{session.pod}"
        why = "; ".join(self._why(v) for v in overdue)
        version = "policy/v1" if self.api.server_minor() >= EVICTION_V1_MINOR else "policy/v1beta1"
        body = {"apiVersion": version, "kind": "Eviction",
                "metadata": {"name": session.pod, "namespace": session.namespace}}
        try:
            self.api.call(
                "POST", f"/api/v1/namespaces/{session.namespace}/pods/{session.pod}/eviction",
                body)
        except ApiError as error:
            if error.status == 429:
                metrics.ACTIONS.labels(action="evict", result="blocked").inc()
                log.warning("%s: eviction refused for now, retrying next pass (%s): %s", where,
                            error.message, why)
                self._event(session, "DebugSessionEvictionBlocked",
                            f"{why}; the eviction was refused ({error.message}); the controller "
                            "tries again every pass", warning=True)
                return "blocked"
            if error.status == 404:
                metrics.ACTIONS.labels(action="evict", result="gone").inc()
                return "gone"
            metrics.ACTIONS.labels(action="evict", result="failed").inc()
            log.error("%s: eviction failed: %s", where, error)
            return "failed"
        self._evicted.add(session.uid)
        metrics.ACTIONS.labels(action="evict", result="evicted").inc()
        log.warning("%s: evicted: %s", where, why)
        self._event(session, "DebugSessionEvicted", f"{why}; the pod was evicted",
                    warning=True)
        return "evicted"

    def _stop(self, verdict: Verdict) -> str:
        session = verdict.session
        if session.kind != ATTACHED:
            return self._report(
                verdict, action="stop", result="unsupported",
                extra="; onExpiry stop ends attached (ephemeral) toolset containers only: the "
                "kubelet restarts an injected sidecar, which goes only when the pod is "
                "recreated (use onExpiry evict for injected pods)")
        if verdict.expires is not None and self._now() < verdict.expires + STOP_GRACE:
            return "waiting"  # it ends itself at its deadline; its status follows
        return self._report(
            verdict, action="stop", result="still-running",
            extra=f"; the attached toolset {session.container} should have ended itself at its "
            f"deadline ({constants.ENV_SESSION_DEADLINE} in its env) and still runs (attached "
            "before the deadline was written, or the policy changed since). The controller "
            "holds no exec right to stop it: evict the pod (its owner recreates it without "
            "the ephemeral container), or use onExpiry evict")
