"""RFC 3339 times as the Kubernetes API writes them (`2026-12-03T06:13:38Z`): the session's facts
in the toolset's environment, the overdue annotation, the API's own timestamps."""

from __future__ import annotations

import datetime as dt
from typing import Any


def parse_time(value: Any) -> dt.datetime | None:
    """An RFC 3339 time (fractions allowed; no zone means UTC); None when absent or malformed
    (annotations and env are written by whoever may create or edit the pod)."""
    if not isinstance(value, str) or not value.strip():
        return None
    try:
        parsed = dt.datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)


def format_time(value: dt.datetime) -> str:
    return value.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
