"""Profiles in the formats people have, as the real tools write them: folded stacks
(flamegraph.pl's input: stackcollapse-*.pl, perf script + stackcollapse, py-spy `--format raw`,
async-profiler's collapsed output), speedscope JSON (py-spy, speedscope's own exports) and pprof
(Go's runtime/pprof, `go tool pprof -proto`), each possibly gzip-compressed, told apart by their
content (not by the file name).

What flamegraph.pl accepts, this accepts: a line with no frames (` 2`, py-spy's idle samples:
counted under the root), fractional counts (`a;b 0.5`), empty frames (`a;;b 1`, kept as frames
with an empty name), CRLF line ends, and bytes that are not UTF-8 (replaced by U+FFFD, and the
page says so).

Every input is hostile: numbers are checked, sizes, stack depth (MAX_DEPTH) and the frames of
all distinct stacks together (MAX_FRAMES) capped, and anything that is not one of the formats
ends in InputError with one line that names the format it was read as and what is wrong.
pprof's profile.proto is read by hand (formats.py writes it by hand for the same reason: no
protobuf runtime for six message types).
"""

from __future__ import annotations

import json
import math
import re
import zlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeGuard

from webhook.render.model import spell_unit
from webhook.results import folded
from webhook.results.folded import Stack

MAX_INPUT = 256 << 20  # bytes after decompression
MAX_DEPTH = folded.MAX_DEPTH  # frames in one stack, open frames of an evented profile
MAX_FRAMES = 10_000_000  # frames of all distinct stacks together (the page carries each one)
MAX_TOTAL = folded.MAX_COUNT  # the sum of all counts: exact in the page's JavaScript numbers
_BINARY = re.compile(rb"[\x00-\x08\x0b\x0c\x0e-\x1f]")  # no text has these; pprof always does
_BLANKS = re.compile(rb"[ \t\r\n]*")
_SNIFF = 64 << 10  # bytes looked at to tell text from binary
_NUMBER = re.compile(r"[0-9]+(?:\.[0-9]*)?|\.[0-9]+")  # flamegraph.pl's counts (and .5)

Counts = dict[Stack, float]  # int where the file counts whole samples


class InputError(ValueError):
    """Input that is not a profile we read; the message names the format it was read as and
    says what is wrong, in one line."""


@dataclass(frozen=True)
class Loaded:
    stacks: Counts
    format: str  # "folded", "speedscope", "pprof"
    unit: str  # what the counts are: "samples", "\u00b5s", "ns", "bytes", ...
    warnings: tuple[str, ...] = field(default=())  # what was repaired on the way, for the page


class _Stacks:
    """Stacks as they are read, with the caps every format shares: depth of one stack, frames
    of all distinct stacks, the sum of the counts."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.stacks: Counts = {}
        self.frames = 0

    def add(self, stack: Stack, count: float, where: str = "") -> None:
        if len(stack) > MAX_DEPTH:
            raise InputError(f"{self.what}: {where + ': ' if where else ''}a stack of "
                             f"{len(stack)} frames, more than {MAX_DEPTH}")
        known = self.stacks.get(stack)
        if known is None:
            self.frames += len(stack)
            if self.frames > MAX_FRAMES:
                raise InputError(f"{self.what}: more than {MAX_FRAMES} frames in all its "
                                 "distinct stacks")
            self.stacks[stack] = count
        else:
            self.stacks[stack] = known + count

    def done(self) -> Counts:
        if sum(self.stacks.values()) > MAX_TOTAL:
            raise InputError(f"{self.what}: the counts add up to more than {MAX_TOTAL}")
        return self.stacks


def load(data: bytes) -> Loaded:
    """Tell the format from the content and read it."""
    if data[:2] == b"\x1f\x8b":
        data = _gunzip(data)
    if len(data) > MAX_INPUT:
        raise InputError(f"larger than {MAX_INPUT >> 20} MiB")
    json_error = ""
    start = blanks.end() if (blanks := _BLANKS.match(data)) else 0
    if data[start:start + 1] in (b"{", b"["):  # JSON, or folded frames like [unknown], {closure}
        try:
            document = json.loads(data)
        except (ValueError, RecursionError) as error:
            json_error = str(error)[:120]
        else:
            return _speedscope(document)
    if data[:2] in (b"\xff\xfe", b"\xfe\xff"):  # UTF-16 with its BOM (a Windows redirect)
        return _folded(_utf16(data), [])
    if _BINARY.search(data[:_SNIFF]):
        try:
            return _pprof(data)
        except InputError as error:
            pprof_error = error
        try:  # a folded file whose frame names hold control characters
            return _text_folded(data)
        except InputError:
            raise pprof_error from None
    try:
        return _text_folded(data)
    except InputError as error:
        if json_error:
            raise InputError(f"neither speedscope JSON ({json_error}) nor {error}") from None
        raise


def _gunzip(data: bytes) -> bytes:
    inflate = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    try:
        out = inflate.decompress(data, MAX_INPUT + 1)
    except zlib.error as error:
        raise InputError(f"gzip: the data is corrupt: {error}") from None
    if len(out) > MAX_INPUT or inflate.unconsumed_tail:
        raise InputError(f"gzip: larger than {MAX_INPUT >> 20} MiB once decompressed")
    if not inflate.eof:
        raise InputError("gzip: the data is truncated")
    return out


def _utf16(data: bytes) -> str:
    try:
        return data.decode("utf-16")
    except UnicodeDecodeError as error:
        raise InputError(f"folded stacks: UTF-16 text that does not decode: {error}") from None


# --- folded stacks --------------------------------------------------------------------------------

def _text_folded(data: bytes) -> Loaded:
    warnings: list[str] = []
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        text = data.decode("utf-8", errors="replace")
        replaced = text.count("\ufffd") - data.count("\ufffd".encode())
        line = data.count(b"\n", 0, error.start) + 1
        warnings.append(f"{replaced} invalid UTF-8 byte sequence{'s' if replaced != 1 else ''}"
                        f" replaced by U+FFFD \ufffd (the first on line {line})")
    return _folded(text.removeprefix("\ufeff"), warnings)


def _folded(text: str, warnings: list[str]) -> Loaded:
    """`STACK COUNT` lines, as flamegraph.pl reads them: the count after the last run of blanks,
    a whole or decimal number; an empty stack counts under the root; blank lines and `#`
    comments skipped."""
    stacks = _Stacks("folded stacks")
    for number, raw in enumerate(text.split("\n"), 1):
        line = raw.rstrip(" \t\r")
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if len(line) > folded.MAX_LINE:
            raise InputError(f"folded stacks: line {number}: longer than {folded.MAX_LINE} "
                             "characters")
        cut = max(line.rfind(" "), line.rfind("\t"))
        count_text = line[cut + 1:]
        if cut < 0 or not _NUMBER.fullmatch(count_text):
            raise InputError(f"folded stacks: line {number}: expected 'frame;frame;... COUNT', "
                             f"got {_excerpt(line)!r}")
        count: float
        if "." in count_text:
            count = float(count_text)
        elif len(count_text.lstrip("0")) > len(str(MAX_TOTAL)):
            raise InputError(f"folded stacks: line {number}: count {_excerpt(count_text)} is "
                             f"more than {MAX_TOTAL}")
        else:
            count = int(count_text)
        stack_text = line[:cut].strip(" \t")
        if count > 0:
            stacks.add(tuple(stack_text.split(";")) if stack_text else (), count,
                       f"line {number}")
    if not stacks.stacks:
        raise InputError("folded stacks: no samples (no 'frame;frame COUNT' line with a count "
                         "above 0)")
    return Loaded(stacks.done(), "folded", "samples", tuple(warnings))


def _excerpt(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


# --- speedscope -----------------------------------------------------------------------------------

# speedscope's units -> (factor to a count, the count's unit)
MICRO = "\u00b5s"  # the micro sign, as the page's units table spells it
_UNITS = {"none": (1, "samples"), "nanoseconds": (1, "ns"), "microseconds": (1, MICRO),
          "milliseconds": (1000, MICRO), "seconds": (1_000_000, MICRO), "bytes": (1, "bytes")}


def _speedscope(document: Any) -> Loaded:
    if not isinstance(document, dict) or not isinstance(document.get("profiles"), list):
        raise InputError("speedscope: JSON, but not a speedscope file (no 'profiles' list)")
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
        raise InputError(f"speedscope: unit {unit[:40]!r} is not one of {', '.join(_UNITS)} "
                         "(or the profiles' units differ)")
    factor, label = _UNITS[unit]
    stacks = _Stacks("speedscope")
    for number, profile in enumerate(profiles):
        where = f"profile {number}"
        # py-spy writes one profile per thread: they are merged under the thread's name
        prefix: Stack = ()
        if len(profiles) > 1 and isinstance(profile.get("name"), str):
            prefix = (folded.clean_frame(profile["name"]),)
        for indices, weight in _speedscope_samples(profile, len(names), where):
            # time units in whole µs or ns; unitless weights may be fractional
            count = round(weight * factor) if label != "samples" else weight
            if count > 0:
                stacks.add(prefix + tuple(names[i] for i in indices), _whole(count), where)
    if not stacks.stacks:
        raise InputError("speedscope: no samples with a weight")
    return Loaded(stacks.done(), "speedscope", label)


def _whole(count: float) -> float:
    """A count as an int when it is one (JSON's 1.0 is a whole sample)."""
    return int(count) if float(count).is_integer() else count


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
            raise InputError(f"speedscope: {where}: 'samples' is not a list")
        if weights is None:
            weights = [1] * len(samples)
        if not isinstance(weights, list) or len(weights) != len(samples):
            raise InputError(f"speedscope: {where}: 'weights' is not a list as long as "
                             "'samples'")
        for index, (sample, weight) in enumerate(zip(samples, weights, strict=True)):
            if not isinstance(sample, list) or not all(
                    _is_int(i) and 0 <= i < frames for i in sample):
                raise InputError(f"speedscope: {where}: sample {index} is not a list of frame "
                                 "indices")
            yield sample, _weight(weight, f"speedscope: {where}: weight {index}")
    elif kind == "evented":
        yield from _evented(profile, frames, where)
    else:
        raise InputError(f"speedscope: {where}: type {str(kind)[:40]!r} is neither 'sampled' "
                         "nor 'evented'")


def _evented(profile: Mapping[str, Any], frames: int,
             where: str) -> Iterator[tuple[list[int], float]]:
    """Open/close events -> the time spent in each stack (between consecutive events).

    The open frames are a path in a tree of the stacks seen (a node per distinct stack, made
    once): each event costs O(1), whatever the depth, and time is added to the node of the
    current stack. The stacks are spelled out once at the end, after the frames of all of them
    are counted against MAX_FRAMES (an 8 MB file of deep stacks that open and close one frame
    at a time otherwise makes gigabytes of copies)."""
    events = profile.get("events")
    if not isinstance(events, list):
        raise InputError(f"speedscope: {where}: 'events' is not a list")
    parents, frame_of, depths = [-1], [-1], [0]  # node 0: the root (no frame open)
    children: dict[tuple[int, int], int] = {}
    spent_time: dict[int, float] = {}
    node = 0
    last = 0.0
    for index, event in enumerate(events):
        if not isinstance(event, dict):
            raise InputError(f"speedscope: {where}: event {index} is not an object")
        at = _weight(event.get("at"), f"speedscope: {where}: event {index} 'at'")
        frame = event.get("frame")
        if not _is_int(frame) or not 0 <= frame < frames:
            raise InputError(f"speedscope: {where}: event {index} has no valid 'frame'")
        if at < last:
            raise InputError(f"speedscope: {where}: event {index} goes back in time")
        if node and at > last:
            spent_time[node] = spent_time.get(node, 0.0) + (at - last)
        last = at
        kind = event.get("type")
        if kind == "O":
            if depths[node] >= MAX_DEPTH:
                raise InputError(f"speedscope: {where}: event {index} opens a frame on "
                                 f"{MAX_DEPTH} open frames")
            key = (node, frame)
            child = children.get(key)
            if child is None:
                child = children[key] = len(parents)
                parents.append(node)
                frame_of.append(frame)
                depths.append(depths[node] + 1)
            node = child
        elif kind == "C" and node and frame_of[node] == frame:
            node = parents[node]
        else:
            raise InputError(f"speedscope: {where}: event {index} neither opens nor closes the "
                             "top frame")
    spent = [(stack_node, weight) for stack_node, weight in spent_time.items()
             if weight > 0]
    if sum(depths[stack_node] for stack_node, _ in spent) > MAX_FRAMES:
        raise InputError(f"speedscope: {where}: more than {MAX_FRAMES} frames in all its "
                         "distinct stacks")
    for stack_node, weight in spent:
        path = []
        while stack_node:
            path.append(frame_of[stack_node])
            stack_node = parents[stack_node]
        path.reverse()
        yield path, weight


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
        raise InputError("pprof: not a profile (no string table or sample types)")

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

    stacks = _Stacks("pprof")
    for number, (ids, values) in enumerate(samples):
        if len(values) != len(types):
            raise InputError(f"pprof: a sample has {len(values)} values for {len(types)} types")
        count = values[column]
        if count <= 0:
            continue
        leaf_first: list[str] = []
        for location in ids:  # inlined functions make more frames than locations
            leaf_first += frames_of(location)
            if len(leaf_first) > MAX_DEPTH:
                raise InputError(f"pprof: sample {number}: a stack of more than {MAX_DEPTH} "
                                 "frames")
        stacks.add(tuple(reversed(leaf_first)), count, f"sample {number}")
    if not stacks.stacks:
        raise InputError(f"pprof: no samples with a positive {types[column] or 'value'}")
    return Loaded(stacks.done(), "pprof", unit)


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
