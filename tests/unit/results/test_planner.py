"""The results service's planner: a due schedule is handed to each picked pod once per cron
minute (across a restart too), at most N runs in flight per namespace, a ticket is taken back
only by the pod it was issued to, problems are reported once, and a ticket never answered
expires and frees its slot."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.unit.schedules.test_plan import SETTINGS, Rules, namespace, pod
from webhook.results import metrics
from webhook.results.planner import PlanError, Planner

T0 = datetime(2026, 12, 3, 7, 0, 20, tzinfo=UTC)
EVERY_MINUTE = json.dumps({"cron": "* * * * *", "duration": "5s"})


def runs(outcome: str, reason: str = "", technique: str = "perf") -> float:
    value = metrics.REGISTRY.get_sample_value(
        "sidecar_debug_results_runs_total",
        {"technique": technique, "outcome": outcome, "reason": reason})
    return value or 0.0


def planner(tmp_path: Path | None, max_concurrent: int = 2) -> Planner:
    return Planner(SETTINGS, Rules(), tmp_path, max_concurrent=max_concurrent)


def test_once_per_cron_minute_and_again_after_a_restart(tmp_path: Path) -> None:
    web = pod("web", annotation=EVERY_MINUTE)
    first = planner(tmp_path)
    [ticket] = first.plan(web, namespace(), [web], T0)
    assert (ticket.schedule, ticket.technique, ticket.duration) == ("pod/shop/web#0", "perf", 5)
    first.finish(ticket.id, "shop", "web", "uid-web")
    assert first.plan(web, namespace(), [web], T0 + timedelta(seconds=20)) == []  # same minute
    # A new process (the Deployment's pod was replaced) reads what was handed out.
    second = planner(tmp_path)
    assert second.plan(web, namespace(), [web], T0 + timedelta(seconds=30)) == []
    [again] = second.plan(web, namespace(), [web], T0 + timedelta(minutes=1))
    assert again.due == (T0 + timedelta(minutes=1)).replace(second=0)


def test_a_pod_still_recording_is_not_started_again(tmp_path: Path) -> None:
    web = pod("web", annotation=EVERY_MINUTE)
    subject = planner(tmp_path)
    assert len(subject.plan(web, namespace(), [web], T0)) == 1
    assert subject.plan(web, namespace(), [web], T0 + timedelta(minutes=1)) == []


def test_fair_share_per_namespace(tmp_path: Path) -> None:
    annotation = json.dumps({"cron": "* * * * *", "duration": "5s", "maxPods": 10})
    pods = [pod(f"web-{i}") for i in range(4)]
    other = [pod("job", namespace="batch")]
    subject = planner(tmp_path, max_concurrent=2)
    deferred = runs("deferred", "busy-namespace")
    issued = [t for p in pods for t in subject.plan(p, namespace("shop", annotation), pods, T0)]
    assert [t.pod for t in issued] == ["web-0", "web-1"]
    assert runs("deferred", "busy-namespace") == deferred + 2
    # Another namespace is not held up by this one.
    assert len(subject.plan(other[0], namespace("batch", annotation), other, T0)) == 1
    # A slot frees: the next pod asking within the deadline gets its run.
    subject.finish(issued[0].id, "shop", "web-0", "uid-web-0")
    [late] = subject.plan(pods[2], namespace("shop", annotation), pods, T0 + timedelta(seconds=30))
    assert late.pod == "web-2" and late.due == T0.replace(second=0)


def test_only_the_pod_it_was_issued_to_can_push_with_a_ticket(tmp_path: Path) -> None:
    web = pod("web", annotation=EVERY_MINUTE)
    subject = planner(tmp_path)
    [ticket] = subject.plan(web, namespace(), [web], T0)
    with pytest.raises(PlanError) as refused:
        subject.finish(ticket.id, "shop", "intruder", "uid-intruder")
    assert refused.value.status == 403 and "planned for pod shop/web" in refused.value.message
    with pytest.raises(PlanError):  # same name, another pod (recreated): the uid tells
        subject.finish(ticket.id, "shop", "web", "uid-other")
    assert subject.finish(ticket.id, "shop", "web", "uid-web") == ticket
    with pytest.raises(PlanError) as used:
        subject.finish(ticket.id, "shop", "web", "uid-web")
    assert used.value.status == 409


def test_a_ticket_not_answered_expires_and_frees_its_slot(tmp_path: Path) -> None:
    web = pod("web", annotation=EVERY_MINUTE)
    subject = planner(tmp_path, max_concurrent=1)
    expired = runs("expired", "no-push")
    [ticket] = subject.plan(web, namespace(), [web], T0)
    later = ticket.expires + timedelta(seconds=1)
    [fresh] = subject.plan(web, namespace(), [web], later)
    assert fresh.id != ticket.id and runs("expired", "no-push") == expired + 1


def test_problems_are_refused_and_counted_once(tmp_path: Path) -> None:
    downgraded = pod("web", annotation=EVERY_MINUTE, profile="lttng")
    subject = planner(tmp_path)
    refused = runs("refused", "ScheduleTechniqueUnavailable")
    for minute in range(3):
        assert subject.plan(downgraded, namespace(), [downgraded],
                            T0 + timedelta(minutes=minute)) == []
    assert runs("refused", "ScheduleTechniqueUnavailable") == refused + 1  # not every minute
