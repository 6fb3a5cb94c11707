"""Profiles in the formats people have: folded stacks, speedscope JSON and pprof, each possibly
gzip-compressed, told apart by their content (not by the file name).

Every input is hostile: frame names are cleaned into folded frames (no `;`, no line breaks),
numbers are checked, sizes capped, and anything that is not one of the formats ends in
InputError with one line that says what was expected. pprof's profile.proto is read by hand
(formats.py writes it by hand for the same reason: no protobuf runtime for six message types).
"""

from __future__ import annotations

import json
import math
import re
import zlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeGuard

from webhook.render.model import spell_unit
from webhook.results import folded
from webhook.results.folded import Stack

MAX_INPUT = 256 << 20  # bytes after decompression
_BINARY = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f]")  # no text has these


class InputError(ValueError):
    """Input that is not a profile we read; the message says what is wrong, in one line."""


@dataclass(frozen=True)
class Loaded:
    stacks: dict[Stack, int]
    format: str  # "folded", "speedscope", "pprof"
    unit: str  # what the counts are: "samples", "µs", "ns", "bytes", ...


def load(data: bytes) -> Loaded:
    """Tell the format from the content and read it."""
    data = _gunzip(data) if data[:2] == b"\x1f\x8b" else data
    if len(data) > MAX_INPUT:
        raise InputError(f"larger than {MAX_INPUT >> 20} MiB")
    if data.lstrip()[:1] in (b"{", b"["):  # JSON, or folded frames like [unknown], {closure}
        try:
            document = json.loads(data)
        except (ValueError, RecursionError):
            pass
        else:
            return _speedscope(document)
    pprof_error = None
    if data[:1] in (b"\x0a", b"\x12"):  # profile.proto's first fields: sample_type, sample
        try:
            return _pprof(data)
        except InputError as error:
            pprof_error = error  # or a folded file that starts with a blank line
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        try:
            return _pprof(data)
        except InputError as error:
            raise InputError(f"neither folded stacks (text) nor a pprof profile: {error}") from None
    try:
        stacks = folded.parse(text)
    except folded.FoldedError as error:
        if pprof_error is not None and _BINARY.search(text):
            raise pprof_error from None
        raise InputError(f"not folded stacks, speedscope JSON or pprof: {error}") from None
    if not stacks:
        raise InputError("no samples: folded stacks with no 'frame;frame COUNT' line")
    return Loaded(stacks, "folded", "samples")


def _gunzip(data: bytes) -> bytes:
    inflate = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    try:
        out = inflate.decompress(data, MAX_INPUT + 1)
    except zlib.error as error:
        raise InputError(f"gzip data is corrupt: {error}") from None
    if len(out) > MAX_INPUT or inflate.unconsumed_tail:
        raise InputError(f"larger than {MAX_INPUT >> 20} MiB once decompressed")
    if not inflate.eof:
        raise InputError("gzip data is truncated")
    return out


# --- speedscope -----------------------------------------------------------------------------------

# speedscope's units -> (factor to an integer count, the count's unit)
MICRO = "\u00b5s"  # the micro sign, as the page's units table spells it
_UNITS = {"none": (1, "samples"), "nanoseconds": (1, "ns"), "microseconds": (1, MICRO),
          "milliseconds": (1000, MICRO), "seconds": (1_000_000, MICRO), "bytes": (1, "bytes")}


def _speedscope(document: Any) -> Loaded:
    if not isinstance(document, dict) or not isinstance(document.get("profiles"), list):
        raise InputError("JSON, but not a speedscope file (no 'profiles' list)")
    shared = document.get("shared")
    raw_frames = shared.get("frames") if isinstance(shared, dict) else None
    if not isinstance(raw_frames, list):
        raise InputError("speedscope: no 'shared.frames' list")
    names = [_speedscope_frame(i, frame) for i, frame in enumerate(raw_frames)]
    profiles = [p for p in document["profiles"] if isinstance(p, dict)]
    if not profiles:
        raise InputError("speedscope: no profiles")
    units = {str(p.get("unit", "none")) for p in profiles}
    unit = units.pop() if len(units) == 1 else ""
    if unit not in _UNITS:
        raise InputError(f"speedscope: unit {unit!r} is not one of {', '.join(_UNITS)} "
                         "(or the profiles' units differ)")
    factor, label = _UNITS[unit]
    stacks: dict[Stack, int] = {}
    for number, profile in enumerate(profiles):
        where = f"speedscope profile {number}"
        # py-spy writes one profile per thread: they are merged under the thread's name
        prefix: Stack = ()
        if len(profiles) > 1 and isinstance(profile.get("name"), str):
            prefix = (folded.clean_frame(profile["name"]),)
        for indices, weight in _speedscope_samples(profile, len(names), where):
            count = round(weight * factor)
            if count > 0 and indices:
                stack = prefix + tuple(names[i] for i in indices)
                stacks[stack] = stacks.get(stack, 0) + count
    if not stacks:
        raise InputError("speedscope: no samples with a weight")
    return Loaded(stacks, "speedscope", label)


def _speedscope_frame(index: int, frame: Any) -> str:
    if not isinstance(frame, dict) or not isinstance(frame.get("name"), str):
        raise InputError(f"speedscope: frame {index} has no 'name' string")
    name = frame["name"]
    where = frame.get("file")
    if isinstance(where, str) and where:
        line = frame.get("line")
        name += f" ({where}:{line})" if _is_int(line) else f" ({where})"
    return folded.clean_frame(name)


def _speedscope_samples(profile: Mapping[str, Any], frames: int,
                        where: str) -> Iterator[tuple[list[int], float]]:
    kind = profile.get("type")
    if kind == "sampled":
        samples, weights = profile.get("samples"), profile.get("weights")
        if not isinstance(samples, list):
            raise InputError(f"{where}: 'samples' is not a list")
        if weights is None:
            weights = [1] * len(samples)
        if not isinstance(weights, list) or len(weights) != len(samples):
            raise InputError(f"{where}: 'weights' is not a list as long as 'samples'")
        for index, (sample, weight) in enumerate(zip(samples, weights, strict=True)):
            if not isinstance(sample, list) or not all(
                    _is_int(i) and 0 <= i < frames for i in sample):
                raise InputError(f"{where}: sample {index} is not a list of frame indices")
            yield sample, _weight(weight, f"{where}: weight {index}")
    elif kind == "evented":
        yield from _evented(profile, frames, where)
    else:
        raise InputError(f"{where}: type {kind!r} is neither 'sampled' nor 'evented'")


def _evented(profile: Mapping[str, Any], frames: int,
             where: str) -> Iterator[tuple[list[int], float]]:
    """Open/close events -> the time spent in each stack (between consecutive events)."""
    events = profile.get("events")
    if not isinstance(events, list):
        raise InputError(f"{where}: 'events' is not a list")
    stack: list[int] = []
    last = 0.0
    for index, event in enumerate(events):
        if not isinstance(event, dict):
            raise InputError(f"{where}: event {index} is not an object")
        at, frame = _weight(event.get("at"), f"{where}: event {index} 'at'"), event.get("frame")
        if not _is_int(frame) or not 0 <= frame < frames:
            raise InputError(f"{where}: event {index} has no valid 'frame'")
        if at < last:
            raise InputError(f"{where}: event {index} goes back in time")
        if stack and at > last:
            yield list(stack), at - last
        last = at
        if event.get("type") == "O":
            stack.append(frame)
        elif event.get("type") == "C" and stack and stack[-1] == frame:
            stack.pop()
        else:
            raise InputError(f"{where}: event {index} neither opens nor closes the top frame")


def _is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _weight(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not (
            math.isfinite(value) and value >= 0):
        raise InputError(f"{where} is not a non-negative number")
    return float(value)


# --- pprof (profile.proto) ------------------------------------------------------------------------

_MAX_VARINT = 10


def _varint(data: bytes, pos: int, end: int) -> tuple[int, int]:
    value = shift = 0
    for index in range(pos, min(end, pos + _MAX_VARINT)):
        byte = data[index]
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, index + 1
        shift += 7
    raise InputError("pprof: a number runs past its message")


def _fields(data: bytes, start: int, end: int) -> Iterator[tuple[int, int, int, int]]:
    """(field number, wire type, value or start, end) of one message's fields."""
    pos = start
    while pos < end:
        key, pos = _varint(data, pos, end)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise InputError("pprof: field number 0")
        if wire == 0:
            value, pos = _varint(data, pos, end)
            yield number, wire, value, pos
        elif wire == 2:
            length, pos = _varint(data, pos, end)
            if pos + length > end:
                raise InputError("pprof: a field runs past its message")
            yield number, wire, pos, pos + length
            pos += length
        elif wire in (1, 5):
            size = 8 if wire == 1 else 4
            if pos + size > end:
                raise InputError("pprof: a field runs past its message")
            yield number, wire, int.from_bytes(data[pos:pos + size], "little"), pos + size
            pos += size
        else:
            raise InputError(f"pprof: wire type {wire} in field {number}")


def _repeated(data: bytes, wire: int, a: int, b: int) -> list[int]:
    """A repeated integer field's values: packed (wire 2) or one (wire 0)."""
    if wire == 0:
        return [a]
    if wire != 2:
        raise InputError("pprof: an integer list of the wrong wire type")
    values = []
    pos = a
    while pos < b:
        value, pos = _varint(data, pos, b)
        values.append(value)
    return values


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def _pprof(data: bytes) -> Loaded:
    strings: list[str] = []
    sample_types: list[tuple[int, int]] = []
    samples: list[tuple[list[int], list[int]]] = []
    locations: dict[int, tuple[int, int, list[int]]] = {}  # id -> mapping, address, functions
    functions: dict[int, tuple[int, int]] = {}  # id -> name, system name
    mappings: dict[int, tuple[int, int]] = {}  # id -> start, file name
    default_type = 0
    for number, wire, a, b in _fields(data, 0, len(data)):
        if number in (1, 2, 3, 4, 5, 6) and wire != 2:
            raise InputError(f"pprof: field {number} is not a message")
        if number == 1:
            fields = {n: v for n, _, v, _ in _fields(data, a, b)}
            sample_types.append((fields.get(1, 0), fields.get(2, 0)))
        elif number == 2:
            ids: list[int] = []
            values: list[int] = []
            for n, w, x, y in _fields(data, a, b):
                if n == 1:
                    ids += _repeated(data, w, x, y)
                elif n == 2:
                    values += [_signed(v) for v in _repeated(data, w, x, y)]
            samples.append((ids, values))
        elif number == 3:
            fields = {n: v for n, w, v, _ in _fields(data, a, b) if w == 0}
            mappings[fields.get(1, 0)] = (fields.get(2, 0), fields.get(5, 0))
        elif number == 4:
            location, mapping, address, lines = 0, 0, 0, []
            for n, w, x, y in _fields(data, a, b):
                if n == 1 and w == 0:
                    location = x
                elif n == 2 and w == 0:
                    mapping = x
                elif n == 3 and w == 0:
                    address = x
                elif n == 4 and w == 2:
                    lines += [v for m, lw, v, _ in _fields(data, x, y) if m == 1 and lw == 0]
            locations[location] = (mapping, address, lines)
        elif number == 5:
            fields = {n: v for n, w, v, _ in _fields(data, a, b) if w == 0}
            functions[fields.get(1, 0)] = (fields.get(2, 0), fields.get(3, 0))
        elif number == 6:
            strings.append(data[a:b].decode("utf-8", errors="replace"))
        elif number == 14 and wire == 0:
            default_type = a
    if not strings or strings[0] != "" or not sample_types:
        raise InputError("not a pprof profile (no string table or sample types)")

    def string(index: int) -> str:
        if not 0 <= index < len(strings):
            raise InputError(f"pprof: string index {index} out of range")
        return strings[index]

    types = [string(kind) for kind, _ in sample_types]
    column = len(types) - 1  # pprof's rule: the last sample type, unless one is named
    if default_type and string(default_type) in types:
        column = types.index(string(default_type))
    unit = spell_unit(string(sample_types[column][1]))
    frames: dict[int, list[str]] = {}

    def frames_of(location_id: int) -> list[str]:
        """A location's frames, leaf first (inlined functions before their caller)."""
        if location_id not in frames:
            if location_id not in locations:
                raise InputError(f"pprof: sample names location {location_id}, not in the file")
            mapping, address, lines = locations[location_id]
            names = []
            for function_id in lines:
                name, system = functions.get(function_id, (0, 0))
                names.append(folded.clean_frame(string(name) or string(system) or "[unknown]"))
            if not names:
                start, file_name = mappings.get(mapping, (0, 0))
                base = string(file_name).rsplit("/", 1)[-1]
                names = [folded.clean_frame(f"[{base}+0x{address - start:x}]") if base
                         else f"0x{address:x}"]
            frames[location_id] = names
        return frames[location_id]

    stacks: dict[Stack, int] = {}
    for ids, values in samples:
        if len(values) != len(types):
            raise InputError(f"pprof: a sample has {len(values)} values for {len(types)} types")
        count = values[column]
        if count <= 0 or not ids:
            continue
        leaf_first = [name for location in ids for name in frames_of(location)]
        stack = tuple(reversed(leaf_first))
        stacks[stack] = stacks.get(stack, 0) + count
    if not stacks:
        raise InputError(f"pprof: no samples with a positive {types[column] or 'value'}")
    return Loaded(stacks, "pprof", unit)


MAX_META = 1 << 20


def read_meta(data: bytes | None, where: str = "meta.json") -> dict[str, Any]:
    """A run's meta.json as a dict; unreadable metadata does not stop the graph: it becomes a
    warning on the page."""
    if data is None:
        return {}
    problem = ""
    if len(data) > MAX_META:
        problem = f"larger than {MAX_META} bytes"
    else:
        try:
            meta = json.loads(data)
        except (ValueError, RecursionError) as error:
            problem = f"not JSON ({str(error)[:100]})"
        else:
            if isinstance(meta, dict):
                return meta
            problem = "not a JSON object"
    return {"warnings": [f"{where} is ignored: {problem}"]}
