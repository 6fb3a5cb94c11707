"""The controller's schedule checks: an Event, once, on the object of every schedule problem.

The results service plans and refuses (it holds no right to write Events); the leader, after
its expiry pass, reads the same annotations with the same code (webhook.schedules.plan) over
the pods that pass listed and one list of namespaces, and reports what keeps a schedule from
running: an annotation that cannot be read (on its namespace or pod), a technique the pod's
granted profile cannot run, a duration or frequency the policy rule does not allow, a pod
without a results agent. Each Event has a name derived from the object, reason and detail, so
it is created once across passes and leaders (a second create is a 409). Parsing is cached by
annotation text and budgeted per annotation: one hostile annotation costs its parse once and
never the pass. Expiry runs first, so it never waits for this.

Calls: list namespaces, create events (the pods come from the expiry pass).
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable
from typing import Any

from webhook.config import Settings
from webhook.controller import metrics
from webhook.controller.expiry import COMPONENT
from webhook.kube.api import KubeApi
from webhook.kube.events import post_event
from webhook.schedules import plan
from webhook.schedules.plan import Book, Problem, RuleSource

log = logging.getLogger(__name__)

MAX_REMEMBERED = 10_000


class ScheduleChecks:
    def __init__(self, api: KubeApi, settings: Settings, rules: RuleSource, *, identity: str,
                 wall_clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC)
                 ) -> None:
        self.api = api
        self.settings = settings
        self.rules = rules
        self.identity = identity
        self.book = Book()
        self._now = wall_clock
        self._reported: set[tuple[str, str, str]] = set()

    def list_namespaces(self) -> list[dict[str, Any]]:
        answer = self.api.call("GET", "/api/v1/namespaces?resourceVersion=0")
        items = answer.get("items")
        return [n for n in items if isinstance(n, dict)] if isinstance(items, list) else []

    def run(self, pods: list[dict[str, Any]]) -> list[Problem]:
        """Report the problems of this pass; returns them all (reported before or not)."""
        found = plan.problems(self.list_namespaces(), pods, self.book, self.settings,
                              self.rules)
        for problem in found:
            key = (problem.uid, problem.reason, problem.detail)
            if key in self._reported:
                continue
            involved = {"apiVersion": "v1", "kind": problem.kind, "name": problem.name,
                        "uid": problem.uid}
            if problem.kind == "Pod":
                involved["namespace"] = problem.namespace
            result = post_event(self.api, involved, problem.reason, problem.message,
                                warning=True, detail=problem.detail, identity=self.identity,
                                now=self._now(), component=COMPONENT)
            if result == "failed":
                continue  # tried again next pass
            if len(self._reported) >= MAX_REMEMBERED:
                self._reported.clear()
            self._reported.add(key)
            if result == "created":
                metrics.SCHEDULE_PROBLEMS.labels(reason=problem.reason).inc()
                where = problem.name if problem.kind == "Namespace" else \
                    f"{problem.namespace}/{problem.name}"
                log.warning("%s %s: %s", problem.kind.lower(), where, problem.message)
        return found
