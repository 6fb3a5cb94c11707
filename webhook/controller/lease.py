"""Leader election through a coordination.k8s.io/v1 Lease (served since Kubernetes 1.14), as
client-go's leaderelection package does it:

- Every `retry_period` each replica reads the Lease. A free Lease (absent, no holder, or a record
  that has not changed for its `leaseDurationSeconds` as measured on this replica's own clock,
  so clock skew between nodes does not matter) is taken with an update that carries the read
  resourceVersion: when two replicas race, the apiserver accepts one and answers 409 to the other.
- The leader renews (`renewTime`) every `retry_period`. If it has not renewed for
  `renew_deadline` (< lease duration) it stops acting, before any other replica can see the Lease
  as expired. It also stops at once when the Lease names another holder.
- On a clean stop (SIGTERM) the leader releases the Lease (empty holder, duration 1 s), so a
  rollout hands over within a retry period; after a crash the others wait the lease duration.

Calls: GET, POST (create) and PUT (update) on one Lease in one namespace.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from webhook.controller import metrics
from webhook.kube.api import ApiError, KubeApi
from webhook.wire.pod import mapping

log = logging.getLogger(__name__)


def micro_time(value: dt.datetime) -> str:
    """A MicroTime as the API writes it."""
    return value.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(frozen=True)
class Timing:
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0

    def problems(self) -> list[str]:
        """What is wrong with these durations (client-go's rules), for a usage error."""
        found = []
        if min(self.lease_duration, self.renew_deadline, self.retry_period) <= 0:
            found.append("the lease duration, renew deadline and retry period must be > 0")
        if self.renew_deadline >= self.lease_duration:
            found.append(f"the renew deadline ({self.renew_deadline:g} s) must be shorter than "
                         f"the lease duration ({self.lease_duration:g} s): a leader that cannot "
                         "renew must stop before another replica takes over")
        if self.retry_period >= self.renew_deadline:
            found.append(f"the retry period ({self.retry_period:g} s) must be shorter than the "
                         f"renew deadline ({self.renew_deadline:g} s)")
        if self.lease_duration != int(self.lease_duration):
            found.append("the lease duration is a whole number of seconds "
                         "(Lease.spec.leaseDurationSeconds)")
        return found


class LeaderElector:
    def __init__(self, api: KubeApi, namespace: str, name: str, identity: str,
                 timing: Timing = Timing(), *,
                 monotonic: Callable[[], float] = time.monotonic,
                 wall_clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
                 on_change: Callable[[bool], None] | None = None) -> None:
        self.api = api
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.timing = timing
        self._monotonic = monotonic
        self._now = wall_clock
        self._on_change = on_change
        self._leader = False
        self._renewed_at = 0.0  # monotonic time of our last successful acquire/renew
        self._observed: tuple[Any, ...] | None = None  # the Lease record last seen
        self._observed_at = 0.0  # monotonic time it was first seen
        self.last_step = monotonic()  # for the health check: the loop is alive
        # Each call must come back well within the renew deadline.
        self.call_timeout = max(1.0, min(5.0, timing.renew_deadline / 2))

    @property
    def is_leader(self) -> bool:
        """True while this replica holds the Lease and renewed it within the renew deadline."""
        return self._leader and (
            self._monotonic() - self._renewed_at < self.timing.renew_deadline)

    # -- one attempt ----------------------------------------------------------------------------

    def _spec(self, now: dt.datetime, acquired: str, transitions: int) -> dict[str, Any]:
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": int(self.timing.lease_duration),
            "acquireTime": acquired,
            "renewTime": micro_time(now),
            "leaseTransitions": transitions,
        }

    def try_acquire_or_renew(self) -> bool:
        """One read and at most one write; True when we hold the Lease afterwards. Raises
        ApiError when the API cannot be asked."""
        now, timeout = self._now(), self.call_timeout
        try:
            lease = self.api.call(
                "GET",
                f"/apis/coordination.k8s.io/v1/namespaces/{self.namespace}/leases/{self.name}",
                timeout=timeout)
        except ApiError as error:
            if error.status != 404:
                raise
            spec = self._spec(now, micro_time(now), 0)
            body = {
                "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": spec,
            }
            try:
                self.api.call("POST",
                              f"/apis/coordination.k8s.io/v1/namespaces/{self.namespace}/leases",
                              body, timeout=timeout)
            except ApiError as created:
                if created.status == 409:  # another replica created it first
                    return False
                raise
            self._observe(spec, "")
            return True

        spec = mapping(lease.get("spec"))
        self._observe(spec, str(mapping(lease.get("metadata")).get("resourceVersion", "")))
        holder = spec.get("holderIdentity") or ""
        duration = spec.get("leaseDurationSeconds")
        duration = duration if isinstance(duration, int) and duration > 0 else int(
            self.timing.lease_duration)
        if holder and holder != self.identity and \
                self._monotonic() < self._observed_at + duration:
            return False  # held by someone else, and alive as far as we can tell
        ours = holder == self.identity
        transitions = spec.get("leaseTransitions")
        transitions = transitions if isinstance(transitions, int) else 0
        acquired = spec.get("acquireTime") if ours else micro_time(now)
        updated = dict(lease)
        updated["spec"] = {**spec, **self._spec(now, str(acquired or micro_time(now)),
                                                transitions if ours else transitions + 1)}
        try:
            answer = self.api.call(
                "PUT",
                f"/apis/coordination.k8s.io/v1/namespaces/{self.namespace}/leases/{self.name}",
                updated, timeout=timeout)
        except ApiError as error:
            if error.status == 409:  # someone else wrote it since we read it
                return False
            raise
        if not ours:
            log.info("took over lease %s/%s from %r", self.namespace, self.name,
                     holder or "(released)")
        self._observe(updated["spec"],
                      str(mapping(answer.get("metadata")).get("resourceVersion", "")))
        return True

    def _observe(self, spec: dict[str, Any], resource_version: str) -> None:
        record = (spec.get("holderIdentity"), spec.get("renewTime"), resource_version)
        if record != self._observed:
            self._observed = record
            self._observed_at = self._monotonic()

    # -- the loop -------------------------------------------------------------------------------

    def step(self) -> None:
        """One retry period's work: acquire or renew, and change roles when that says so."""
        self.last_step = self._monotonic()
        try:
            held = self.try_acquire_or_renew()
        except ApiError as error:
            log.warning("lease %s/%s: %s", self.namespace, self.name, error)
            held = None
        if held:
            self._renewed_at = self._monotonic()
            self._set_leader(True)
        elif held is False and self._leader:
            log.warning("lease %s/%s is held by another replica: stopping", self.namespace,
                        self.name)
            self._set_leader(False)
        elif self._leader and not self.is_leader:
            log.warning("lease %s/%s not renewed for %g s (renew deadline): stopping",
                        self.namespace, self.name, self.timing.renew_deadline)
            self._set_leader(False)

    def _set_leader(self, leader: bool) -> None:
        if leader == self._leader:
            return
        self._leader = leader
        metrics.LEADER.set(1 if leader else 0)
        log.info("%s lease %s/%s as %s", "holding" if leader else "no longer holding",
                 self.namespace, self.name, self.identity)
        if self._on_change is not None:
            self._on_change(leader)

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            self.step()
            stop.wait(self.timing.retry_period)
        self.release()

    def release(self) -> None:
        """Hand the Lease back (a clean stop): empty holder, so the next replica need not wait
        out the lease duration."""
        if not self._leader:
            return
        self._set_leader(False)
        now = micro_time(self._now())
        try:
            lease = self.api.call(
                "GET",
                f"/apis/coordination.k8s.io/v1/namespaces/{self.namespace}/leases/{self.name}",
                timeout=self.call_timeout)
            spec = mapping(lease.get("spec"))
            if spec.get("holderIdentity") != self.identity:
                return
            lease["spec"] = {**spec, "holderIdentity": "", "leaseDurationSeconds": 1,
                             "renewTime": now, "acquireTime": now}
            self.api.call(
                "PUT",
                f"/apis/coordination.k8s.io/v1/namespaces/{self.namespace}/leases/{self.name}",
                lease, timeout=self.call_timeout)
            log.info("released lease %s/%s", self.namespace, self.name)
        except ApiError as error:
            log.warning("could not release lease %s/%s (the others wait for it to expire): %s",
                        self.namespace, self.name, error)
