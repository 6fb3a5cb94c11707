"""Output formats computed from folded stacks: speedscope JSON and pprof.

pprof's profile.proto is encoded here by hand (a few dozen lines of varints and length-prefixed
fields) rather than through the protobuf runtime: the results page only ever writes six message
types with unsigned integer and string fields, and the generated code plus the protobuf package
(a compiled extension, a version to keep in step with the generated module) would be the biggest
dependency of the page for the smallest part of it. The encoding follows
github.com/google/pprof proto/profile.proto; the tests read it back with `go tool pprof` and
with a decoder of their own.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Mapping
from typing import Any

from webhook.results.folded import Stack, total

SPEEDSCOPE_SCHEMA = "https://www.speedscope.app/file-format-schema.json"


def speedscope(stacks: Mapping[Stack, int], name: str) -> dict[str, Any]:
    """A speedscope file: one sampled profile, each distinct stack one weighted sample."""
    frames: list[dict[str, str]] = []
    index: dict[str, int] = {}
    samples: list[list[int]] = []
    weights: list[int] = []
    for stack, count in sorted(stacks.items(), key=lambda item: (-item[1], item[0])):
        if count <= 0:
            continue
        ids = []
        for frame in stack:
            if frame not in index:
                index[frame] = len(frames)
                frames.append({"name": frame})
            ids.append(index[frame])
        samples.append(ids)
        weights.append(count)
    return {
        "$schema": SPEEDSCOPE_SCHEMA,
        "name": name,
        "exporter": "sidecar-debug",
        "activeProfileIndex": 0,
        "shared": {"frames": frames},
        "profiles": [{
            "type": "sampled",
            "name": name,
            "unit": "none",
            "startValue": 0,
            "endValue": total(stacks),
            "samples": samples,
            "weights": weights,
        }],
    }


def speedscope_json(stacks: Mapping[Stack, int], name: str) -> bytes:
    return json.dumps(speedscope(stacks, name), separators=(",", ":")).encode()


# --- pprof (profile.proto) ------------------------------------------------------------------------

def _varint(value: int) -> bytes:
    if value < 0:
        value += 1 << 64  # int64 as two's complement, ten bytes
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _key(number: int, wire: int) -> bytes:
    return _varint(number << 3 | wire)


def _int(number: int, value: int) -> bytes:
    """A varint field; proto3 leaves zero values out."""
    return _key(number, 0) + _varint(value) if value else b""


def _bytes(number: int, payload: bytes) -> bytes:
    return _key(number, 2) + _varint(len(payload)) + payload


def _packed(number: int, values: list[int]) -> bytes:
    return _bytes(number, b"".join(_varint(value) for value in values)) if values else b""


def pprof(stacks: Mapping[Stack, int], *, sample_type: tuple[str, str] = ("samples", "count"),
          period_ns: int = 0, time_ns: int = 0, duration_ns: int = 0,
          comment: str = "") -> bytes:
    """A gzip-compressed profile.proto: one function and one location per distinct frame name,
    one sample per distinct stack (locations leaf first, as pprof wants them). With `period_ns`
    (1e9 / sampling frequency) the profile says how much CPU time one sample stands for."""
    strings: dict[str, int] = {"": 0}

    def string(text: str) -> int:
        if text not in strings:
            strings[text] = len(strings)
        return strings[text]

    def value_type(kind: str, unit: str) -> bytes:
        return _int(1, string(kind)) + _int(2, string(unit))

    body = bytearray(_bytes(1, value_type(*sample_type)))
    locations: dict[str, int] = {}
    for stack, count in sorted(stacks.items(), key=lambda item: (-item[1], item[0])):
        if count <= 0:
            continue
        ids = []
        for frame in reversed(stack):
            if frame not in locations:
                locations[frame] = len(locations) + 1
            ids.append(locations[frame])
        body += _bytes(2, _packed(1, ids) + _packed(2, [count]))
    for ident in locations.values():
        line = _int(1, ident)  # Line.function_id: function ids equal location ids
        body += _bytes(4, _int(1, ident) + _bytes(4, line))
    for frame, ident in locations.items():
        name = string(frame)
        body += _bytes(5, _int(1, ident) + _int(2, name) + _int(3, name))
    comment_index = string(comment) if comment else 0
    period_type = value_type("cpu", "nanoseconds") if period_ns else b""
    tail = bytearray()
    for text in strings:  # dict order is index order
        tail += _bytes(6, text.encode())
    tail += _int(9, time_ns) + _int(10, duration_ns)
    if period_ns:
        tail += _bytes(11, period_type) + _int(12, period_ns)
    if comment_index:
        tail += _key(13, 0) + _varint(comment_index)
    return gzip.compress(bytes(body + tail), mtime=0)
