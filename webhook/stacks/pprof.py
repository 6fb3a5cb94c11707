"""pprof's profile.proto (github.com/google/pprof proto/profile.proto), gzip-compressed:
written from folded stacks for the results page's downloads and the exports, and read from the
files people have (Go's runtime/pprof, `go tool pprof -proto`).

It is encoded and decoded here by hand (a few dozen lines of varints and length-prefixed fields)
rather than through the protobuf runtime: the results page only ever writes six message types
with unsigned integer and string fields, and the generated code plus the protobuf package (a
compiled extension, a version to keep in step with the generated module) would be the biggest
dependency of the page for the smallest part of it. The tests read what is written back with
`go tool pprof` and with a decoder of their own.
"""

from __future__ import annotations

import gzip
from collections.abc import Iterator, Mapping

from webhook.stacks import MAX_DEPTH, InputError, Loaded, Stack, Tally, spell_unit
from webhook.stacks.folded import clean_frame

# --- writing --------------------------------------------------------------------------------------

def _put_varint(value: int) -> bytes:
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
    return _put_varint(number << 3 | wire)


def _int(number: int, value: int) -> bytes:
    """A varint field; proto3 leaves zero values out."""
    return _key(number, 0) + _put_varint(value) if value else b""


def _bytes(number: int, payload: bytes) -> bytes:
    return _key(number, 2) + _put_varint(len(payload)) + payload


def _packed(number: int, values: list[int]) -> bytes:
    return _bytes(number, b"".join(_put_varint(value) for value in values)) if values else b""


def encode(stacks: Mapping[Stack, int], *, sample_type: tuple[str, str] = ("samples", "count"),
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
        tail += _key(13, 0) + _put_varint(comment_index)
    return gzip.compress(bytes(body + tail), mtime=0)


# --- reading --------------------------------------------------------------------------------------

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


def decode(data: bytes) -> Loaded:
    """The stacks of a profile.proto (uncompressed), in the unit of its default sample type
    (pprof's rule: the last one unless the profile names one)."""
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
                names.append(clean_frame(string(name) or string(system) or "[unknown]"))
            if not names:
                start, file_name = mappings.get(mapping, (0, 0))
                base = string(file_name).rsplit("/", 1)[-1]
                names = [clean_frame(f"[{base}+0x{address - start:x}]") if base
                         else f"0x{address:x}"]
            frames[location_id] = names
        return frames[location_id]

    stacks = Tally("pprof")
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
