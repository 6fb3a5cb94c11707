"""The results service's schedule state: which recordings were handed to which pod, and which
are in flight (the service is the one writer, so this memory is the truth; it is kept on the
results volume too, RESULTS/.schedules/state.json, so that a restart neither repeats nor
forgets a run).

`plan(pod, namespace, namespace_pods, now)` answers a toolset's "what do I record now?": the
schedules that pick this pod (webhook.schedules.plan, computed from the objects the service
watches, never from what the toolset says), each checked against the pod's granted profile and
the policy rule covering it, due this minute (or within the starting deadline) and not yet
handed to this pod, within the fair share: at most `max_concurrent` runs in flight per
namespace. Each recording handed out is a ticket; the toolset pushes its run (or its failure)
with the ticket, and only the pod the ticket was issued to may. A ticket not answered within
the recording's duration plus TICKET_MARGIN expires and frees its slot.

Failures (`failed(ticket, reason)`) are counted per schedule and pod uid, by reason: after
SUSPEND_AFTER with one reason the recording is no longer handed to that pod, until the pod
(its uid), its profile (the granted profile's name and definition) or the schedule (its
fields) changes: the schedule, the profile and the pod are the ticket's `fingerprint`, compared
at every plan. A stored run clears the count. Counts and suspensions are kept in the state
file, so a restart does not restart a failing pod's three attempts.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import secrets
import tempfile
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from webhook.config import Settings
from webhook.errors import Refused
from webhook.results import metrics
from webhook.schedules import plan as plans
from webhook.schedules.plan import Book, Problem, RuleSource, Toolset
from webhook.schedules.spec import Schedule

log = logging.getLogger(__name__)

TICKET_MARGIN = timedelta(minutes=2)
STATE_DIR = ".schedules"
STATE_FILE = "state.json"
FORGET_AFTER = timedelta(days=2)  # state of a (schedule, pod) not seen for this long goes
MAX_REPORTED = 10_000
SUSPEND_AFTER = 3  # failures of one schedule on one pod with the same reason
_CODE_LIMIT = 40
# How long an agent waits before it asks again (its `pollSeconds`, which it honours within
# 5-600 s): a pod with nothing to record asks once a minute (a new schedule, or a pod newly
# picked by a namespace schedule, is seen within that); a pod with a schedule asks again just
# after the next minute its cron matches, SPREAD_SECONDS spread by pod so that a fleet's
# scheduled pods do not all ask at second 0; a pod whose recording is due but waits (the
# namespace has its runs in flight, or its previous run is still being recorded) asks again
# in BUSY_POLL_SECONDS.
IDLE_POLL_SECONDS = 60
BUSY_POLL_SECONDS = 20
MIN_POLL_SECONDS = 5
SPREAD_SECONDS = 15


class PlanError(Refused):
    """A push the service refuses; `status` is the HTTP answer."""


@dataclass(frozen=True)
class Ticket:
    id: str
    namespace: str
    pod: str
    uid: str
    schedule: str
    technique: str
    duration: int
    frequency: int
    due: datetime
    cron: str
    issued: datetime
    expires: datetime
    fingerprint: str = ""  # the schedule and the pod's profile it was planned with

    def to_plan(self) -> dict[str, Any]:
        """What the agent is told (toolset/bin/results-agent reads these keys)."""
        return {"ticket": self.id, "schedule": self.schedule, "technique": self.technique,
                "seconds": self.duration, "frequency": self.frequency,
                "due": self.due.isoformat(), "expires": self.expires.isoformat()}


def _minute(moment: datetime) -> datetime:
    return moment.astimezone(UTC).replace(second=0, microsecond=0)


def fingerprint(schedule: Schedule, toolset: Toolset | None, settings: Settings) -> str:
    """What a suspension is bound to besides the pod's uid: the schedule's fields (a changed
    annotation is a changed schedule) and the pod's granted profile, by name and definition
    (an operator who gives the profile what it lacked lifts it)."""
    profile = toolset.profile if toolset is not None else ""
    definition = settings.profiles.get(profile)
    text = "\n".join((schedule.key, schedule.cron.expression, str(schedule.duration),
                      schedule.technique, str(schedule.frequency), schedule.selector.describe(),
                      str(schedule.max_pods), profile, repr(definition)))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass
class Streak:
    """The failures of one schedule on one pod since its last stored run."""

    fingerprint: str
    counts: dict[str, int] = field(default_factory=dict)  # failure reason -> failures
    suspended: str = ""  # the reason it is suspended for; "" while it is not

    def to_json(self) -> dict[str, Any]:
        return {"fingerprint": self.fingerprint, "counts": dict(self.counts),
                "suspended": self.suspended}

    @classmethod
    def from_json(cls, raw: Any) -> Streak | None:
        if not isinstance(raw, dict) or not isinstance(raw.get("fingerprint"), str):
            return None
        counts = raw.get("counts")
        suspended = raw.get("suspended")
        return cls(raw["fingerprint"][:64], {
            str(k)[:_CODE_LIMIT]: v for k, v in (counts.items() if isinstance(counts, dict)
                                                 else ())
            if isinstance(v, int) and not isinstance(v, bool) and 0 < v < 1 << 20},
            suspended[:_CODE_LIMIT] if isinstance(suspended, str) else "")


class Planner:
    def __init__(self, settings: Settings, rules: RuleSource, results_dir: Path | None, *,
                 max_concurrent: int = 2, book: Book | None = None) -> None:
        self.settings = settings
        self.rules = rules
        self.max_concurrent = max_concurrent
        self.book = book or Book()
        self.path = results_dir / STATE_DIR / STATE_FILE if results_dir is not None else None
        self.lock = threading.Lock()
        self.last: dict[tuple[str, str], datetime] = {}  # (schedule key, pod uid) -> minute
        self.seen: dict[tuple[str, str], datetime] = {}
        self.tickets: dict[str, Ticket] = {}
        self.reported: set[tuple[str, str, str]] = set()
        self.deferred: set[tuple[str, str, datetime]] = set()
        self.streaks: dict[tuple[str, str], Streak] = {}  # (schedule key, pod uid)
        self.withheld: set[tuple[str, str, datetime]] = set()  # suspended, counted once
        self._load()

    # --- state on the volume ----------------------------------------------------------------

    def _load(self) -> None:
        if self.path is None:
            return
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return
        entries = data.get("last") if isinstance(data, dict) else None
        for key, value in (entries.items() if isinstance(entries, dict) else ()):
            schedule, _, uid = str(key).rpartition("|")
            try:
                moment = datetime.fromisoformat(str(value)).astimezone(UTC)
            except ValueError:
                continue
            self.last[(schedule, uid)] = moment
            self.seen[(schedule, uid)] = moment
        streaks = data.get("failures") if isinstance(data, dict) else None
        for key, value in (streaks.items() if isinstance(streaks, dict) else ()):
            schedule, _, uid = str(key).rpartition("|")
            streak = Streak.from_json(value)
            if streak is not None and schedule:
                self.streaks[(schedule, uid)] = streak
                self.seen.setdefault((schedule, uid),
                                     self.last.get((schedule, uid)) or datetime.now(UTC))

    def _save(self, now: datetime) -> None:
        for key in [k for k, seen in self.seen.items() if now - seen > FORGET_AFTER]:
            self.seen.pop(key, None)
            self.last.pop(key, None)
            self.streaks.pop(key, None)
        if self.path is None:
            return
        data = {"last": {f"{schedule}|{uid}": moment.isoformat()
                         for (schedule, uid), moment in sorted(self.last.items())},
                "failures": {f"{schedule}|{uid}": streak.to_json()
                             for (schedule, uid), streak in sorted(self.streaks.items())}}
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            handle, temporary = tempfile.mkstemp(dir=self.path.parent, prefix=".state-")
            with os.fdopen(handle, "w", encoding="utf-8") as out:
                json.dump(data, out, indent=1)
            os.replace(temporary, self.path)
        except OSError as error:
            log.error("cannot save the schedules' state to %s: %s", self.path, error)

    # --- problems: counted and logged once --------------------------------------------------

    def _report(self, problem: Problem, technique: str = "") -> None:
        key = (problem.uid, problem.reason, problem.detail)
        if key in self.reported:
            return
        if len(self.reported) >= MAX_REPORTED:
            self.reported.clear()
        self.reported.add(key)
        metrics.SCHEDULE_PROBLEMS.labels(reason=problem.reason).inc()
        if technique:
            metrics.RUNS.labels(technique=technique, outcome="refused",
                                reason=problem.reason).inc()
        where = problem.name if problem.kind == "Namespace" else \
            f"{problem.namespace}/{problem.name}"
        log.warning("%s %s: %s", problem.kind.lower(), where, problem.message)

    # --- tickets -------------------------------------------------------------------------------

    def _expire(self, now: datetime) -> None:
        for ticket in [t for t in self.tickets.values() if t.expires <= now]:
            del self.tickets[ticket.id]
            metrics.RUNS.labels(technique=ticket.technique, outcome="expired",
                                reason="no-push").inc()
            log.warning("schedule %s: %s/%s did not push its run for %s before %s", ticket.schedule,
                        ticket.namespace, ticket.pod, ticket.due.isoformat(),
                        ticket.expires.isoformat())

    def in_flight(self, namespace: str) -> int:
        return sum(1 for t in self.tickets.values() if t.namespace == namespace)

    def poll_seconds(self, pod: Mapping[str, Any], schedules: Iterable[Schedule],
                     issued: Iterable[Ticket], now: datetime) -> int:
        """When the pod's agent should ask again (IDLE_POLL_SECONDS and the rule above),
        given the schedules that apply to it and the tickets it was just handed (it records
        those first, then waits: their duration is taken off)."""
        now = now.astimezone(UTC)
        uid = plans.uid_of(pod)
        recording = max((t.duration for t in issued), default=0)
        boundary = _minute(now) + timedelta(minutes=1)
        spread = int(plans.digest(uid or plans.name_of(pod)), 16) % SPREAD_SECONDS
        wait = float(IDLE_POLL_SECONDS)
        with self.lock:
            for schedule in schedules:
                minute = plans.due_minute(schedule, now, self.last.get((schedule.key, uid)))
                if minute is not None and (schedule.key, uid, minute) in self.deferred:
                    wait = min(wait, BUSY_POLL_SECONDS)  # due, the namespace busy: soon again
                elif schedule.cron.matches(boundary):
                    wait = min(wait, (boundary - now).total_seconds() + spread - recording)
        return int(min(max(wait, MIN_POLL_SECONDS), IDLE_POLL_SECONDS))

    def plan(self, pod: Mapping[str, Any], namespace: Mapping[str, Any] | None,
             namespace_pods: Iterable[Mapping[str, Any]], now: datetime,
             applied: list[Schedule] | None = None) -> list[Ticket]:
        """The recordings this pod should start now (each a ticket it pushes its run with);
        `applied`, when given, receives the schedules that apply to the pod (poll_seconds)."""
        now = now.astimezone(UTC)
        uid = plans.uid_of(pod)
        issued: list[Ticket] = []
        with self.lock:
            self._expire(now)
            schedules, problems = plans.applicable(pod, namespace, namespace_pods, self.book,
                                                   self.settings)
            for problem in problems:
                self._report(problem)
            if applied is not None:
                applied.extend(schedules)
            toolset = plans.toolset_of(pod, self.settings) if schedules else None
            changed = False
            for schedule in schedules:
                key = (schedule.key, uid)
                self.seen[key] = now
                refused = plans.check(schedule, pod, toolset, self.rules)
                if refused is not None:
                    self._report(refused, schedule.technique)
                    continue
                last = self.last.get(key)
                minute = plans.due_minute(schedule, now, last)
                if last is None:
                    # First seen: from now on. A matching minute now stays due until it is
                    # handed out (the namespace may be busy at this very poll).
                    self.last[key] = (minute - timedelta(minutes=1)) if minute \
                        else _minute(now)
                    changed = True
                if minute is None:
                    continue
                current = fingerprint(schedule, toolset, self.settings)
                had = key in self.streaks
                withheld = self._suspended(key, current, schedule, pod, minute)
                changed = changed or (had and key not in self.streaks)
                if withheld:
                    continue
                if any(t.schedule == schedule.key and t.uid == uid
                       for t in self.tickets.values()):
                    continue  # still recording the previous run: not started again
                if self.in_flight(schedule.namespace) >= self.max_concurrent:
                    mark = (schedule.key, uid, minute)
                    if mark not in self.deferred:
                        self.deferred.add(mark)
                        metrics.RUNS.labels(technique=schedule.technique, outcome="deferred",
                                            reason="busy-namespace").inc()
                        log.info("schedule %s: %s/%s waits: %d runs already in flight in "
                                 "namespace %s (at most %d)", schedule.key,
                                 plans.namespace_of(pod), plans.name_of(pod),
                                 self.in_flight(schedule.namespace), schedule.namespace,
                                 self.max_concurrent)
                    continue  # asked again at the next poll, while within the deadline
                ticket = Ticket(
                    id=secrets.token_urlsafe(18), namespace=plans.namespace_of(pod),
                    pod=plans.name_of(pod), uid=uid, schedule=schedule.key,
                    technique=schedule.technique, duration=schedule.duration,
                    frequency=schedule.frequency, due=minute, cron=schedule.cron.expression,
                    issued=now, expires=now + timedelta(seconds=schedule.duration)
                    + TICKET_MARGIN, fingerprint=current)
                self.tickets[ticket.id] = ticket
                self.last[key] = minute
                changed = True
                issued.append(ticket)
                metrics.RUNS.labels(technique=ticket.technique, outcome="planned",
                                    reason="").inc()
                log.info("schedule %s due at %s: %s/%s records %s for %d s at %d Hz",
                         ticket.schedule, minute.isoformat(), ticket.namespace, ticket.pod,
                         ticket.technique, ticket.duration, ticket.frequency)
            if len(self.deferred) > MAX_REPORTED:
                self.deferred.clear()
            if len(self.withheld) > MAX_REPORTED:
                self.withheld.clear()
            if changed:
                self._save(now)
        return issued

    def finish(self, ticket_id: str, namespace: str, pod: str, uid: str | None) -> Ticket:
        """Take back a ticket from the pod it was issued to; PlanError otherwise."""
        with self.lock:
            ticket = self.tickets.get(ticket_id)
            if ticket is None:
                raise PlanError(409, "no such run in flight: the ticket is unknown, expired or "
                                "already used (plans are at GET /agent/v1/plan)")
            if (ticket.namespace, ticket.pod) != (namespace, pod) or (
                    uid is not None and uid != ticket.uid):
                raise PlanError(403, f"this run was planned for pod {ticket.namespace}/"
                                f"{ticket.pod}, not for {namespace}/{pod}")
            del self.tickets[ticket_id]
            return ticket

    # --- failures and suspension ---------------------------------------------------------------

    def _suspended(self, key: tuple[str, str], current: str, schedule: Schedule,
                   pod: Mapping[str, Any], minute: datetime) -> bool:
        """True when this schedule is suspended for this pod (counted once per cron minute
        withheld). A streak planned with another schedule or profile is dropped: what it
        failed with has changed (a new pod has a new uid, hence no streak)."""
        streak = self.streaks.get(key)
        if streak is None:
            return False
        if streak.fingerprint != current:
            del self.streaks[key]
            if streak.suspended:
                log.info("schedule %s: %s/%s: resumed (the schedule or the pod's profile "
                         "changed since it was suspended)", schedule.key,
                         plans.namespace_of(pod), plans.name_of(pod))
            return False
        if not streak.suspended:
            return False
        mark = (schedule.key, key[1], minute)
        if mark not in self.withheld:
            self.withheld.add(mark)
            metrics.RUNS.labels(technique=schedule.technique, outcome="suspended",
                                reason=streak.suspended).inc()
        return True

    def failed(self, ticket: Ticket, reason: str) -> tuple[int, bool]:
        """Count a failed recording: (failures of this schedule on this pod with this reason,
        whether this one suspended it)."""
        key = (ticket.schedule, ticket.uid)
        with self.lock:
            streak = self.streaks.get(key)
            if streak is None or streak.fingerprint != ticket.fingerprint:
                streak = self.streaks[key] = Streak(ticket.fingerprint)
            if reason not in streak.counts and len(streak.counts) >= 20:
                streak.counts.clear()  # a pod making up reasons does not grow the state
            count = streak.counts[reason] = streak.counts.get(reason, 0) + 1
            newly = count >= SUSPEND_AFTER and not streak.suspended
            if newly:
                streak.suspended = reason
                log.warning("schedule %s: %s/%s: suspended after %d failures (%s)",
                            ticket.schedule, ticket.namespace, ticket.pod, count, reason)
            self.seen[key] = max(self.seen.get(key, ticket.issued), ticket.issued)
            self._save(ticket.issued)
        return count, newly

    def succeeded(self, ticket: Ticket) -> None:
        """A stored run: the schedule's failures on this pod are forgotten."""
        with self.lock:
            if self.streaks.pop((ticket.schedule, ticket.uid), None) is not None:
                self._save(ticket.issued)

    def suspended(self, schedule: str, uid: str) -> str:
        """The reason `schedule` is suspended for pod `uid`, or ""."""
        with self.lock:
            streak = self.streaks.get((schedule, uid))
            return streak.suspended if streak is not None else ""
