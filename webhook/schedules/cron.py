"""Cron expressions, the five fields of crontab(5), in UTC.

`minute hour day-of-month month day-of-week`, each `*`, a number, a range `a-b`, a step `*/n`
or `a-b/n`, or a comma-separated list of those; month and weekday names (jan, mon) are
accepted, Sunday is 0 or 7, and the macros @hourly, @daily (@midnight), @weekly, @monthly and
@yearly (@annually) too. As in Vixie cron, when both day-of-month and day-of-week are
restricted a day matches if either does.

A parser of its own (about a hundred lines, tested) rather than a dependency: the results
service needs two questions answered - does a time match, and which minute of the last few is
due (`Cron.due`, whose cost does not depend on the expression) - and no timezone handling
(schedules are UTC, as the service's clock). `previous`/`next` search up to five years and are
for people (`sidecar-debug schedule check`). Every annotation is hostile: ASCII digits only,
bounded length, and an expression that can never match is refused when parsed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

MACROS = {
    "@hourly": "0 * * * *",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@weekly": "0 0 * * 0",
    "@monthly": "0 0 1 * *",
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
}
_MONTHS = {name: i for i, name in enumerate(
    "jan feb mar apr may jun jul aug sep oct nov dec".split(), 1)}
_DAYS = {name: i for i, name in enumerate("sun mon tue wed thu fri sat".split())}
_FIELDS: tuple[tuple[str, int, int, dict[str, int]], ...] = (
    ("minute", 0, 59, {}), ("hour", 0, 23, {}), ("day of month", 1, 31, {}),
    ("month", 1, 12, _MONTHS), ("day of week", 0, 7, _DAYS))
SEARCH_DAYS = 366 * 5  # enough for Feb 29; a rarer expression (Feb 29 AND a Monday) is
# matched as day-of-month OR day-of-week, so it recurs within the week


class CronError(ValueError):
    """Not a cron expression; the message names the field and the problem."""


_DIGITS = re.compile(r"[0-9]{1,4}")
MAX_EXPRESSION = 200  # characters; a real crontab field list is far shorter
# Days per month in a leap year: a day-of-month that no chosen month has never comes.
_MONTH_DAYS = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


def _number(text: str, name: str, low: int, high: int, names: dict[str, int]) -> int:
    # ASCII digits only: str.isdigit() accepts '²' and other digits int() refuses.
    value = int(text) if _DIGITS.fullmatch(text) else names.get(text.lower())
    if value is None:
        raise CronError(f"{name}: {text!r} is not a number"
                        + (f" or a name ({', '.join(names)})" if names else ""))
    if not low <= value <= high:
        raise CronError(f"{name}: {value} is out of range {low}-{high}")
    return value


def _field(text: str, name: str, low: int, high: int, names: dict[str, int]) -> frozenset[int]:
    values: set[int] = set()
    for part in text.split(","):
        if not part:
            raise CronError(f"{name}: empty list item in {text!r}")
        base, slash, step_text = part.partition("/")
        step = 1
        if slash:
            if not _DIGITS.fullmatch(step_text) or int(step_text) == 0:
                raise CronError(f"{name}: step {step_text!r} is not a positive number")
            step = int(step_text)
        if base == "*":
            first, last = low, high
        elif "-" in base:
            start, _, end = base.partition("-")
            first = _number(start, name, low, high, names)
            last = _number(end, name, low, high, names)
            if first > last:
                raise CronError(f"{name}: range {base!r} runs backwards")
        else:
            first = _number(base, name, low, high, names)
            last = high if slash else first
        values.update(range(first, last + 1, step))
    return frozenset(values)


@dataclass(frozen=True)
class Cron:
    expression: str
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 = Sunday
    any_day: bool  # day of month is *
    any_weekday: bool  # day of week is *

    def _day_matches(self, moment: datetime) -> bool:
        if moment.month not in self.months:
            return False
        weekday = (moment.weekday() + 1) % 7  # Python: Monday 0; cron: Sunday 0
        day_ok = moment.day in self.days
        weekday_ok = weekday in self.weekdays
        if self.any_day or self.any_weekday:
            return day_ok and weekday_ok
        return day_ok or weekday_ok

    def matches(self, moment: datetime) -> bool:
        return (moment.minute in self.minutes and moment.hour in self.hours
                and self._day_matches(moment))

    def can_match(self) -> bool:
        """Some day of some year matches (`0 0 31 2 *` never does: February has no 31st)."""
        if self.any_day or not self.any_weekday:
            return True  # every day, or day-of-month OR a weekday (weekdays come every week)
        return any(day <= _MONTH_DAYS[month - 1] for month in self.months for day in self.days)

    def due(self, now: datetime, after: datetime | None, window: timedelta) -> datetime | None:
        """The latest matching minute in (after, now] that is at most `window` old, or None.
        Checks at most window/1 min + 1 minutes: the cost does not depend on the expression."""
        now = now.astimezone(UTC).replace(second=0, microsecond=0)
        oldest = now - window
        if after is not None:
            oldest = max(oldest, after.astimezone(UTC).replace(second=0, microsecond=0)
                         + timedelta(minutes=1))
        moment = now
        while moment >= oldest:
            if self.matches(moment):
                return moment
            moment -= timedelta(minutes=1)
        return None

    def previous(self, now: datetime) -> datetime | None:
        """The latest matching minute at or before `now` (UTC), None if none in five years."""
        now = now.astimezone(UTC).replace(second=0, microsecond=0)
        day = now.replace(hour=0, minute=0)
        for back in range(SEARCH_DAYS):
            candidate_day = day - timedelta(days=back)
            if not self._day_matches(candidate_day):
                continue
            for hour in sorted(self.hours, reverse=True):
                for minute in sorted(self.minutes, reverse=True):
                    moment = candidate_day.replace(hour=hour, minute=minute)
                    if moment <= now:
                        return moment
        return None

    def next(self, after: datetime) -> datetime | None:
        """The first matching minute strictly after `after` (UTC)."""
        after = after.astimezone(UTC).replace(second=0, microsecond=0)
        day = after.replace(hour=0, minute=0)
        for forward in range(SEARCH_DAYS):
            candidate_day = day + timedelta(days=forward)
            if not self._day_matches(candidate_day):
                continue
            for hour in sorted(self.hours):
                for minute in sorted(self.minutes):
                    moment = candidate_day.replace(hour=hour, minute=minute)
                    if moment > after:
                        return moment
        return None


def parse(expression: str) -> Cron:
    if not isinstance(expression, str):
        raise CronError(f"expected a string like '0 * * * *', got {type(expression).__name__}")
    if len(expression) > MAX_EXPRESSION:
        raise CronError(f"longer than {MAX_EXPRESSION} characters")
    text = MACROS.get(expression.strip().lower(), expression)
    parts = text.split()
    if len(parts) != 5:
        raise CronError(f"{expression!r} has {len(parts)} fields; a cron expression has five: "
                        "minute hour day-of-month month day-of-week (e.g. '0 * * * *' hourly)")
    parsed = [_field(part, *spec) for part, spec in zip(parts, _FIELDS, strict=True)]
    weekdays = frozenset(day % 7 for day in parsed[4])
    result = Cron(expression, parsed[0], parsed[1], parsed[2], parsed[3], weekdays,
                  any_day=parts[2].startswith("*"), any_weekday=parts[4].startswith("*"))
    if not result.can_match():
        raise CronError(f"{expression!r} never matches: none of its months has one of its days "
                        "of the month")
    return result
