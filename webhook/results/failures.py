"""Failed scheduled recordings reach the pod's owner (issue 23, item 7).

A toolset whose recording fails reports it (`POST /agent/v1/failures`: the plan's ticket, a
short machine `reason` and a one-line human `message`); the ticket's identity (the pod's bound
token and the ticket the service issued to that pod) says which pod and schedule it is for,
never the body. The service then

- stores the failure as a failed run of that pod (webhook.results.store: the results page
  lists it beside the pod's other runs, for whoever may read the namespace);
- posts an Event on the pod, `RecordingFailed` (one line), at most one per schedule and reason
  per hour per pod: `Notifier` keeps the last post of each in memory (a restart forgets it; the
  Event's name carries the clock hour, so a restart within that hour meets the Event it made
  and posts no second one);
- after SUSPEND_AFTER failures of one schedule on one pod with the same reason, stops handing
  out that recording (webhook.results.planner) and posts `RecordingSuspended`, saying what
  lifts it: the pod recreated (a new uid), its profile changed, or the schedule changed.

The report is written next to a hostile app (the toolset records it, and the tools' last lines
carry the app's text): every field is type-checked, the reason must be a short code, and the
message loses its control characters (a newline would forge a second log line, a bidi override
would reorder the page's text) and is cut to MAX_MESSAGE characters.

Calls (through webhook.kube.events.post_event): create events in the pod's namespace.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from webhook.errors import Refused
from webhook.kube.api import KubeApi
from webhook.kube.events import post_event
from webhook.results import metrics
from webhook.results.planner import SUSPEND_AFTER

log = logging.getLogger(__name__)

COMPONENT = "sidecar-debug-results"
REASON_FAILED = "RecordingFailed"
REASON_SUSPENDED = "RecordingSuspended"
EVENT_INTERVAL = timedelta(hours=1)  # at most one Event per (pod, schedule, reason) in this
MAX_MESSAGE = 300  # characters of the agent's message kept (after cleaning)
MAX_REPORT_BYTES = 16 << 10  # the whole report; the service answers 413 beyond
MAX_REMEMBERED = 10_000  # rate-limit entries kept (older than EVENT_INTERVAL are dropped first)
FIELDS = ("ticket", "reason", "message")
_CODE = re.compile(r"[a-z0-9][a-z0-9-]{0,39}")


class ReportError(Refused):
    """A failure report the service refuses (400): the message says which field and why."""


@dataclass(frozen=True)
class FailureReport:
    reason: str  # a short machine code: not-possible, no-target, tool-failed, timeout, ...
    message: str  # one line, cleaned, at most MAX_MESSAGE characters


def clean_text(value: str, limit: int = MAX_MESSAGE) -> str:
    """`value` as one line of plain text: every character that is not printable (control
    characters, line and paragraph separators, format characters such as bidi overrides,
    unassigned code points) becomes a space, runs of spaces one, then cut to `limit`."""
    cut = value[: limit * 4]  # cleaning only shortens; no need to walk a longer string
    printable = "".join(c if c.isprintable() else " " for c in cut)
    return " ".join(printable.split())[:limit]


def parse_report(body: Any) -> FailureReport:
    """The report of `POST /agent/v1/failures`, type-checked; ReportError says what is wrong."""
    if not isinstance(body, dict):
        raise ReportError(400, "expected a JSON object: {\"ticket\": the plan's ticket, "
                          "\"reason\": a short code, \"message\": one line}")
    unknown = sorted(str(key)[:40] for key in body if key not in FIELDS)
    if unknown:
        raise ReportError(400, f"unknown field {unknown[0]!r} (fields: {', '.join(FIELDS)})")
    if not isinstance(body.get("ticket"), str):
        raise ReportError(400, "ticket: expected the plan's ticket (a string)")
    reason = body.get("reason")
    if not isinstance(reason, str) or not _CODE.fullmatch(reason):
        raise ReportError(400, "reason: expected a short code of lower-case letters, digits "
                          "and '-' (at most 40), such as not-possible or no-target")
    message = body.get("message")
    if not isinstance(message, str):
        raise ReportError(400, "message: expected one line of text saying what failed")
    return FailureReport(reason, clean_text(message) or "no message")


def legacy_report(body: Mapping[str, Any]) -> FailureReport:
    """A failure pushed to `POST /agent/v1/runs` as `{"ticket", "error", "reason"}` (toolsets
    injected before /agent/v1/failures existed): the same cleaning; a reason that is not a
    code is `failed`."""
    reason = body.get("reason")
    error = body.get("error")
    return FailureReport(reason if isinstance(reason, str) and _CODE.fullmatch(reason)
                         else "failed",
                         (clean_text(error) if isinstance(error, str) else "") or "no message")


def event_hour(now: datetime) -> str:
    return now.astimezone(UTC).strftime("%Y%m%dT%H")


class Notifier:
    """Events on pods about their scheduled recordings, rate-limited in memory: at most one per
    (pod uid, schedule, Event reason, failure reason) per `interval`. Without an API (`api`
    None: `results serve`, unit tests of other parts) nothing is posted."""

    def __init__(self, api: KubeApi | None, *, identity: str,
                 interval: timedelta = EVENT_INTERVAL,
                 clock: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        self.api = api
        self.identity = identity
        self.interval = interval
        self.clock = clock
        self.lock = threading.Lock()
        self.last: dict[tuple[str, str, str, str], datetime] = {}

    def _claim(self, key: tuple[str, str, str, str], now: datetime) -> bool:
        """True (and the slot taken) when no Event of `key` was posted within the interval."""
        with self.lock:
            last = self.last.get(key)
            if last is not None and now - last < self.interval:
                return False
            if len(self.last) >= MAX_REMEMBERED:
                for old in [k for k, t in self.last.items() if now - t >= self.interval]:
                    del self.last[old]
                if len(self.last) >= MAX_REMEMBERED:
                    self.last.clear()
            self.last[key] = now
            return True

    def post(self, pod: Mapping[str, str], schedule: str, code: str, reason: str,
             message: str) -> str:
        """Post `reason` on `pod` ({namespace, name, uid}) unless one was posted for this
        schedule and failure `code` within the interval: "posted", "rate-limited", "exists"
        (its name for this hour is taken: posted before a restart), "failed" (logged) or
        "off"."""
        if self.api is None:
            return "off"
        now = self.clock()
        key = (pod["uid"], schedule, reason, code)
        if not self._claim(key, now):
            outcome = "rate-limited"
        else:
            involved = {"apiVersion": "v1", "kind": "Pod", "name": pod["name"],
                        "namespace": pod["namespace"], "uid": pod["uid"]}
            result = post_event(self.api, involved, reason, clean_text(message, 1024),
                                warning=True, detail=f"{schedule}/{code}/{event_hour(now)}",
                                identity=self.identity, now=now, component=COMPONENT)
            outcome = "posted" if result == "created" else result
            if result == "failed":
                with self.lock:  # the next failure tries again
                    self.last.pop(key, None)
        metrics.EVENTS.labels(reason=reason, outcome=outcome).inc()
        return outcome


def failed_message(technique: str, schedule: str, due: datetime, report: FailureReport,
                   count: int) -> str:
    """The RecordingFailed Event's one line."""
    left = SUSPEND_AFTER - count
    then = (f"{left} more with this reason and the service stops asking this pod"
            if left > 0 else "the service has stopped asking this pod")
    return (f"scheduled {technique} recording of schedule {schedule} (due "
            f"{due.astimezone(UTC):%Y-%m-%d %H:%M} UTC) failed ({report.reason}): "
            f"{report.message} [{then}; failed runs are on the results page]")


def suspended_message(technique: str, schedule: str, report: FailureReport) -> str:
    """The RecordingSuspended Event's one line: what happened and what lifts it."""
    return (f"schedule {schedule}: {technique} recordings of this pod are suspended after "
            f"{SUSPEND_AFTER} failures ({report.reason}: {report.message}). Fix the cause and "
            "recreate the pod, change its profile, or change the schedule annotation; any of "
            "these resumes them")
