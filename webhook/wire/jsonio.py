"""JSON on the hot path: orjson (C; parsing and writing a pod review several times faster than the
stdlib), with the stdlib behind it for what orjson refuses: NaN/Infinity literals, lone
surrogates, non-string keys, integers beyond 64 bits on output. Input that neither accepts gets the
stdlib's error message.

One difference stays: orjson reads an integer beyond 64 bits as a float. The apiserver never
sends one (it decoded the object into Go's int64 fields before calling us).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import orjson


def loads(data: bytes | str) -> Any:
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(data)


def dumps(
    value: Any, *, sort_keys: bool = False, default: Callable[[Any], Any] | None = None
) -> bytes:
    """Compact JSON bytes (no spaces), as the stdlib's separators=(",", ":") writes them;
    `default` converts what JSON has no type for, as in both libraries."""
    try:
        return orjson.dumps(
            value, default=default, option=orjson.OPT_SORT_KEYS if sort_keys else None
        )
    except TypeError:
        return json.dumps(
            value, separators=(",", ":"), sort_keys=sort_keys, default=default
        ).encode()


class ShapeError(ValueError):
    """A JSON text with more values than its reader allows (the message says how many)."""


def check_shape(text: str, max_values: int) -> None:
    """Refuse, before any decoder builds it, a JSON text of more than `max_values` strings,
    arrays, objects and separators: a few MiB of `{"1":0,"2":0,...}` cost a decoder seconds of
    CPU without releasing the GIL (2.5 s for 16 MiB), where one 16 MiB string costs
    milliseconds. Strings are skipped by the stdlib's C scanner, the rest counted with
    str.count: linear, and one Python step per string. Malformed strings are left to the
    decoder's own error."""
    scan = json.decoder.scanstring  # type: ignore[attr-defined]
    values = 0
    position = 0
    while True:
        quote = text.find('"', position)
        segment = text[position:] if quote < 0 else text[position:quote]
        values += segment.count(",") + segment.count("[") + segment.count("{")
        if quote < 0:
            break
        values += 1
        if values > max_values:
            break
        try:
            _, position = scan(text, quote + 1, True)
        except ValueError:
            return
    if values > max_values:
        raise ShapeError(f"more than {max_values} JSON values")
