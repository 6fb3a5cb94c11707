"""The readers of profiles take files people download from anywhere (folded stacks, speedscope
JSON sampled and evented, pprof, gzip'd or not): fuzzed per format, each input read within a
budget of CPU time and memory, and only InputError escapes, with a one-line message."""

from __future__ import annotations

import gzip
import json
import math
import time
import tracemalloc
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from webhook.stacks import MAX_DEPTH, MAX_FRAMES, InputError, folded, pprof, speedscope
from webhook.stacks.detect import load

STACKS = folded.parse("main;run;fib 60\nmain;gc 5\nmain;run 3\n")
PPROF = gzip.decompress(pprof.encode(STACKS, period_ns=10_101_010, time_ns=10 ** 18,
                                     duration_ns=30 * 10 ** 9, comment="x"))
SPEEDSCOPE = json.loads(speedscope.encode(STACKS, "x"))

# Per input: CPU seconds and traced memory beyond the input's own bytes. A decoder that is
# linear in its input reads these small inputs in milliseconds and a few hundred KiB; the
# budgets are loose enough for a slow, shared machine and far below what a quadratic or
# exploding decoder takes (an 8 MB evented file once took 100 s and 5.3 GB).
CPU_BUDGET = 2.0
MEMORY_BUDGET = 16 << 20


@contextmanager
def budget(size: int) -> Iterator[None]:
    tracemalloc.start()
    began = time.process_time()
    try:
        yield
        spent = time.process_time() - began
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert spent < CPU_BUDGET, f"{spent:.2f} s of CPU for {size} bytes"
    assert peak < MEMORY_BUDGET + 20 * size, f"{peak >> 10} KiB for {size} bytes"


def _check(data: bytes) -> None:
    with budget(len(data)):
        try:
            loaded = load(data)
        except InputError as error:
            message = str(error)
            assert message and "\n" not in message and "\r" not in message, message
            return
    assert all(len(frames) <= MAX_DEPTH for frames in loaded.stacks)
    assert sum(map(len, loaded.stacks)) <= MAX_FRAMES
    assert all(isinstance(name, str) and "\n" not in name and ";" not in name
               for frames in loaded.stacks for name in frames)
    assert all(count > 0 and math.isfinite(count) for count in loaded.stacks.values())


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=512))
@example(b"\x1f\x8b")
@example(b"\x0a\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01")
@example(b"[" * 5000)
@example(b"main;fib \xc2\xb2\n")
def test_arbitrary_bytes(data: bytes) -> None:
    _check(data)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(st.integers(0, len(PPROF) - 1), st.integers(0, 255)), max_size=8),
       st.integers(0, len(PPROF)), st.booleans())
def test_damaged_pprof(flips: list[tuple[int, int]], cut: int, zipped: bool) -> None:
    """A real profile with bytes changed and cut short: lengths, varints and indices lie."""
    data = bytearray(PPROF)
    for position, value in flips:
        data[position] = value
    blob = bytes(data[:cut or len(data)])
    _check(gzip.compress(blob) if zipped else blob)


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2 ** 70), 2 ** 70)
    | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20)


@settings(max_examples=400, deadline=None)
@given(st.sampled_from(["shared", "profiles", "frames", "type", "unit", "samples", "weights",
                        "events", "startValue", "endValue"]), JSON)
def test_speedscope_with_a_field_replaced(field: str, value: Any) -> None:
    document = json.loads(json.dumps(SPEEDSCOPE))
    if field == "frames":
        document["shared"]["frames"] = value
    elif field in ("shared", "profiles"):
        document[field] = value
    else:
        document["profiles"][0][field] = value
    _check(json.dumps(document).encode())


FRAME_TEXT = st.text(st.characters(codec="utf-8"), max_size=12) | st.sampled_from(
    ["", "[unknown]", "{closure}", "a b", "\t", "\r", "#x", "0.5"])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.lists(FRAME_TEXT, max_size=6),
                          st.sampled_from([" ", "  ", "\t", " \t"]),
                          st.sampled_from(["1", "2", "0", "0.5", ".5", "3.", "007", "1e3", "-1",
                                           "99999999999999999999", ""]),
                          st.sampled_from(["\n", "\r\n", "\r", ""])), max_size=8),
       st.binary(max_size=4), st.booleans())
def test_folded_lines_as_tools_write_them(lines: list[tuple[list[str], str, str, str]],
                                         noise: bytes, zipped: bool) -> None:
    """Stacks, blanks, counts (whole, fractional, huge, negative) and line ends mixed, with
    a few raw bytes (not UTF-8, control) spliced in."""
    text = "".join(";".join(frames) + gap + count + end for frames, gap, count, end in lines)
    data = text.encode("utf-8", errors="surrogatepass")
    middle = len(data) // 2
    data = data[:middle] + noise + data[middle:]
    _check(gzip.compress(data) if zipped else data)


def _events(opens: list[tuple[bool, int, float]], frames: int) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    at = 0.0
    for is_open, frame, step in opens:
        at += step
        events.append({"type": "O" if is_open else "C", "frame": frame % (frames + 1), "at": at})
    return events


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 5), st.sampled_from([0, 0.5, 1, 2.5])),
                max_size=40),
       st.sampled_from(["none", "seconds", "milliseconds", "nanoseconds", "bytes", "parsecs"]))
def test_speedscope_evented_events(opens: list[tuple[bool, int, float]], unit: str) -> None:
    """Open and close events in any order (unbalanced, closing the wrong frame, frame indices
    one past the table)."""
    document = {"shared": {"frames": [{"name": f"f{i}"} for i in range(5)]},
                "profiles": [{"type": "evented", "unit": unit, "startValue": 0, "endValue": 9,
                              "events": _events(opens, 5)}]}
    _check(json.dumps(document).encode())


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.integers(-1, 5), max_size=8), max_size=10),
       st.none() | st.lists(st.none() | st.integers(-2, 5) | st.floats(), max_size=10),
       st.sampled_from(["none", "seconds", "bytes"]))
def test_speedscope_sampled_samples(samples: list[list[int]], weights: list[Any] | None,
                                    unit: str) -> None:
    document = {"shared": {"frames": [{"name": f"f{i}", "file": "x.py", "line": i}
                                      for i in range(5)]},
                "profiles": [{"type": "sampled", "unit": unit, "samples": samples,
                              **({} if weights is None else {"weights": weights})}]}
    _check(json.dumps(document).encode())


def test_deep_evented_files_are_refused_within_the_budget() -> None:
    """What ran past 100 s at 5.3 GB: frames opened deep, then one closed and opened again and
    again (every event a new stack of the full depth), here 1 MB of it."""
    depth = MAX_DEPTH + 10
    events = [{"type": "O", "frame": 0, "at": 0} for _ in range(depth)]
    document = {"shared": {"frames": [{"name": "f"}]},
                "profiles": [{"type": "evented", "unit": "none", "events": events}]}
    data = json.dumps(document).encode()
    with budget(len(data)):
        try:
            load(data)
        except InputError as error:
            assert f"on {MAX_DEPTH} open frames" in str(error)
        else:
            raise AssertionError("a stack deeper than MAX_DEPTH was read")


def test_a_wide_evented_file_reads_in_linear_time() -> None:
    """Within the depth cap, a frame opened and closed at the top of a deep stack, over and
    over: each event costs the same whatever the depth (no copy of the open stack)."""
    frames = [{"name": f"f{i}"} for i in range(3)]
    events: list[dict[str, Any]] = [{"type": "O", "frame": 0, "at": 0} for _ in range(2000)]
    at = 0
    for round_ in range(20_000):
        at += 1
        top = 1 + round_ % 2
        events += [{"type": "O", "frame": top, "at": at}, {"type": "C", "frame": top, "at": at + 1}]
        at += 1
    document = {"shared": {"frames": frames},
                "profiles": [{"type": "evented", "unit": "none", "events": events}]}
    data = json.dumps(document).encode()
    with budget(len(data)):
        loaded = load(data)
    assert len(loaded.stacks) == 3  # the deep stack, and it with f1 or f2 on top
    assert max(map(len, loaded.stacks)) == 2001
