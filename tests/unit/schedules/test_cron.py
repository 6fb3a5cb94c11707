"""Cron expressions: the fields crontab(5) allows, the day-of-month OR day-of-week rule, the last
due minute and the next one, and refusals that name the field."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from webhook.schedules.cron import CronError, parse


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


@pytest.mark.parametrize("expression,now,previous", [
    ("0 * * * *", "2026-12-03T07:42:10", "2026-12-03T07:00:00"),
    ("*/15 * * * *", "2026-12-03T07:42:10", "2026-12-03T07:30:00"),
    ("5-10/2 3 * * *", "2026-12-03T07:42", "2026-12-03T03:09:00"),
    ("30 2 * * mon-fri", "2026-12-06T12:00", "2026-12-04T02:30:00"),  # Sunday -> Friday
    ("0 0 1 jan *", "2026-12-03T07:42", "2026-01-01T00:00:00"),
    ("@hourly", "2026-12-03T07:00", "2026-12-03T07:00:00"),
    ("0 12 * * 7", "2026-12-03T07:42", "2026-11-29T12:00:00"),  # 7 is Sunday too
    ("0 0 29 2 *", "2026-12-03T07:42", "2024-02-29T00:00:00"),
])
def test_previous(expression: str, now: str, previous: str) -> None:
    assert parse(expression).previous(at(now)) == at(previous)


def test_next_and_matches() -> None:
    cron = parse("0,30 9-17 * * 1-5")
    assert cron.next(at("2026-12-04T17:30")) == at("2026-12-07T09:00")  # Friday -> Monday
    assert cron.matches(at("2026-12-03T09:30"))
    assert not cron.matches(at("2026-12-05T09:30"))  # Saturday


def test_day_of_month_or_day_of_week_when_both_restricted() -> None:
    cron = parse("0 0 13 * fri")
    assert cron.matches(at("2026-12-11T00:00"))  # a Friday, not the 13th
    assert cron.matches(at("2026-12-13T00:00"))  # the 13th, a Sunday
    assert not cron.matches(at("2026-12-12T00:00"))


@pytest.mark.parametrize("expression,message", [
    ("0 * * *", "has 4 fields"),
    ("61 * * * *", "minute: 61 is out of range 0-59"),
    ("0 24 * * *", "hour: 24 is out of range 0-23"),
    ("*/0 * * * *", "step '0' is not a positive number"),
    ("0 0 * foo *", "month: 'foo' is not a number or a name"),
    ("10-5 * * * *", "runs backwards"),
    ("1,,2 * * * *", "empty list item"),
])
def test_refusals_name_the_field(expression: str, message: str) -> None:
    with pytest.raises(CronError, match=message):
        parse(expression)
