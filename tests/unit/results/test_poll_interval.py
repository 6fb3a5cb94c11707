"""How long an agent is told to wait before it asks for its plan again (pollSeconds): once a
minute with nothing to record, just after its next due minute otherwise (spread by pod), soon
again while its due run waits for a busy namespace. An agent that follows the answers is
handed every due minute's run, in that minute, with a fraction of the polls of a fixed 20 s."""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from tests.unit.results.test_planner import planner
from tests.unit.schedules.test_plan import namespace, pod
from webhook.results.planner import (
    BUSY_POLL_SECONDS,
    IDLE_POLL_SECONDS,
    SPREAD_SECONDS,
    Planner,
    Ticket,
)
from webhook.schedules.spec import Schedule

T0 = datetime(2026, 12, 3, 7, 0, 20, tzinfo=UTC)


def ask(subject: Planner, web: dict[str, Any], ns: dict[str, Any], pods: list[dict[str, Any]],
        now: datetime) -> tuple[list[Ticket], int]:
    applied: list[Schedule] = []
    tickets = subject.plan(web, ns, pods, now, applied)
    return tickets, subject.poll_seconds(web, applied, tickets, now)


def test_a_pod_with_nothing_to_record_asks_once_a_minute(tmp_path: Path) -> None:
    plain = pod("plain")
    assert ask(planner(tmp_path), plain, namespace(), [plain], T0) == ([], IDLE_POLL_SECONDS)
    # Picked by no namespace schedule (it takes the first pod by name): idle as well.
    picky = json.dumps({"cron": "* * * * *", "duration": "5s", "maxPods": 1})
    first, second = pod("a-web"), pod("b-web")
    subject = planner(tmp_path)
    assert ask(subject, second, namespace("shop", picky), [first, second], T0) == (
        [], IDLE_POLL_SECONDS)
    tickets, wait = ask(subject, first, namespace("shop", picky), [first, second], T0)
    assert len(tickets) == 1 and wait < IDLE_POLL_SECONDS


def test_a_pod_asks_again_just_after_its_next_due_minute(tmp_path: Path) -> None:
    web = pod("web", annotation=json.dumps({"cron": "*/5 * * * *", "duration": "5s"}))
    subject = planner(tmp_path)
    # 07:01:20, next due 07:05: the next minute does not match, ask in a minute.
    assert ask(subject, web, namespace(), [web], T0 + timedelta(minutes=1)) == (
        [], IDLE_POLL_SECONDS)
    # 07:04:20: the next minute matches: ask just after it, within the spread.
    _, wait = ask(subject, web, namespace(), [web], T0 + timedelta(minutes=4))
    asked = T0 + timedelta(minutes=4, seconds=wait)
    assert datetime(2026, 12, 3, 7, 5, tzinfo=UTC) <= asked < datetime(
        2026, 12, 3, 7, 5, SPREAD_SECONDS, tzinfo=UTC)
    [ticket], _ = ask(subject, web, namespace(), [web], asked)
    assert ticket.due == datetime(2026, 12, 3, 7, 5, tzinfo=UTC)


def test_the_recording_is_taken_off_the_wait(tmp_path: Path) -> None:
    # The agent records first, then waits: it must still ask in the next due minute.
    web = pod("web", annotation=json.dumps({"cron": "* * * * *", "duration": "30s"}))
    [ticket], wait = ask(planner(tmp_path), web, namespace(), [web], T0)
    asked = T0 + timedelta(seconds=ticket.duration + wait)
    assert datetime(2026, 12, 3, 7, 1, tzinfo=UTC) <= asked < datetime(
        2026, 12, 3, 7, 1, SPREAD_SECONDS, tzinfo=UTC)


def test_a_run_waiting_for_a_busy_namespace_is_asked_for_again_soon(tmp_path: Path) -> None:
    annotation = json.dumps({"cron": "*/10 * * * *", "duration": "5s", "maxPods": 10})
    pods = [pod(f"web-{i}") for i in range(3)]
    subject = planner(tmp_path, max_concurrent=2)
    at = T0.replace(second=5)
    waits = [ask(subject, p, namespace("shop", annotation), pods, at) for p in pods]
    assert [len(tickets) for tickets, _ in waits] == [1, 1, 0]
    assert waits[2][1] == BUSY_POLL_SECONDS


def test_pods_are_spread_over_the_first_seconds_of_the_minute(tmp_path: Path) -> None:
    every = json.dumps({"cron": "* * * * *", "duration": "5s"})
    waits = set()
    for number in range(40):
        web = pod(f"web-{number}", annotation=every)
        subject = planner(tmp_path / str(number))
        _, wait = ask(subject, web, namespace(), [web], T0 + timedelta(seconds=1))
        waits.add(wait)
    assert len(waits) >= SPREAD_SECONDS // 2 and max(waits) - min(waits) < SPREAD_SECONDS


def test_an_agent_following_the_answers_gets_every_due_run_with_few_polls(
        tmp_path: Path) -> None:
    expression = "*/3 * * * *"
    rng = random.Random(7)  # noqa: S311 - start times, not secrets
    for number in range(20):
        web = pod(f"web-{number}", annotation=json.dumps({"cron": expression,
                                                          "duration": "10s"}))
        subject = planner(tmp_path / str(number))
        # Starts in 07:01-07:02, minutes that are not due: every run is at its minute.
        now = T0.replace(minute=1, second=0) + timedelta(seconds=rng.uniform(0, 119))
        end = now + timedelta(hours=1)
        polls, due = 0, []
        while now < end:
            tickets, wait = ask(subject, web, namespace(), [web], now)
            polls += 1
            for ticket in tickets:
                assert 0 <= (now - ticket.due).total_seconds() < SPREAD_SECONDS + 1
                due.append(ticket.due)
                subject.finish(ticket.id, "shop", web["metadata"]["name"], "uid-" +
                               web["metadata"]["name"])
                now += timedelta(seconds=ticket.duration)
            now += timedelta(seconds=wait)
        first = due[0]
        assert due == [first + timedelta(minutes=3 * i) for i in range(len(due))], number
        assert len(due) >= 19  # every third minute of the hour after the first poll
        assert polls <= 60 + len(due) + 2  # 180 at a fixed 20 s
