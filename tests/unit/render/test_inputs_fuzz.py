"""The renderer's readers take files people download from anywhere (folded stacks, speedscope
JSON, pprof, gzip'd or not): fuzzed, only InputError escapes, with a one-line message. A pod's
meta.json, whatever it holds, only annotates the page."""

from __future__ import annotations

import gzip
import json
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from webhook.render.inputs import InputError, load
from webhook.results import folded, formats

STACKS = folded.parse("main;run;fib 60\nmain;gc 5\nmain;run 3\n")
PPROF = gzip.decompress(formats.pprof(STACKS, period_ns=10_101_010, time_ns=10 ** 18,
                                      duration_ns=30 * 10 ** 9, comment="x"))
SPEEDSCOPE = json.loads(formats.speedscope_json(STACKS, "x"))


def _check(data: bytes) -> None:
    try:
        loaded = load(data)
    except InputError as error:
        message = str(error)
        assert message and "\n" not in message and "\r" not in message, message
        return
    assert all(frames and all(frames) for frames in loaded.stacks)
    assert all(count > 0 for count in loaded.stacks.values())


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


META_KEYS = st.sampled_from(["technique", "type", "seconds", "duration", "frequency",
                             "samples", "namedShare", "runtime", "unwinding", "notes",
                             "warnings", "summary", "started", "pod", "exitCode", "unit"])


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(META_KEYS, JSON, max_size=8))
def test_a_pods_meta_json_only_annotates_the_page(meta: dict[str, Any]) -> None:
    """meta.json comes from the pod's /tmp like stacks.folded: whatever its fields hold, the
    page and the CLI summary are made (the stacks decide the graph)."""
    from webhook import render
    from webhook.render.inputs import read_meta

    data = json.dumps(meta).encode()
    profile = render.Profile(STACKS, meta=read_meta(data), title="t", name="n")
    assert render.render(profile).html.startswith("<!doctype html>")
    assert all("\n" not in line for line in render.summary(profile, hottest=3))
