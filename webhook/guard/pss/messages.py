"""How the checks show what they found: quoted names and values (everything in a pod is
written by its creator), and the phrases Pod Security admission builds its details from."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

_SHOWN_MAX = 80


def quote(text: str) -> str:
    """`text` in double quotes, escaped to one printable ASCII line, cut when long: names and
    values come from whoever wrote the pod."""
    shown = json.dumps(text)
    return shown if len(shown) <= _SHOWN_MAX else shown[: _SHOWN_MAX - 4] + '..."'


def shown(value: Any) -> str:
    """A field's value as a message shows it: strings quoted, the rest as JSON."""
    if isinstance(value, str):
        return quote(value)
    try:
        text = json.dumps(value, sort_keys=True, default=str)
    except (TypeError, ValueError, RecursionError):
        text = type(value).__name__
    return text if len(text) <= _SHOWN_MAX else text[: _SHOWN_MAX - 3] + "..."


def as_text(value: Any) -> str:
    """A value as a plain string (for sets of offending values, listed as PSA does)."""
    return value if isinstance(value, str) else shown(value)


def join_quote(items: Iterable[str]) -> str:
    return ", ".join(quote(i) for i in items)


def plural(singular: str, plural: str, count: int) -> str:
    return singular if count == 1 else plural


def set_to(value: Any) -> str:
    """`true` for True (PSA's `=true`), else the value shown."""
    return "true" if value is True else shown(value)


def unset_or_false(value: Any) -> bool:
    return value is None or value is False
