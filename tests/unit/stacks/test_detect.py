"""A profile's formats (folded stacks, speedscope JSON and pprof, gzip or not) told apart by
content; our own exports and a real Go CPU profile read back to their stacks; every malformed
input ends in InputError with one line, never another exception."""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from webhook.stacks import MAX_DEPTH, InputError, Stack, detect, folded, pprof, speedscope

FOLDED = "main;handle;fib 60\nmain;handle;render 15\nmain;io_wait 25\n"
STACKS = folded.parse(FOLDED)


@pytest.mark.parametrize("encode", [
    pytest.param(lambda s: folded.format_stacks(s).encode(), id="folded"),
    pytest.param(lambda s: gzip.compress(folded.format_stacks(s).encode()), id="folded.gz"),
    pytest.param(lambda s: speedscope.encode(s, "web"), id="speedscope"),
    pytest.param(lambda s: pprof.encode(s), id="pprof.gz"),
    pytest.param(lambda s: gzip.decompress(pprof.encode(s)), id="pprof"),
])
def test_every_format_reads_back_to_the_stacks(
    encode: Callable[[dict[Stack, int]], bytes],
) -> None:
    loaded = detect.load(encode(STACKS))
    assert loaded.stacks == STACKS and loaded.unit == "samples"


@pytest.mark.parametrize("text", [
    pytest.param("\n" + FOLDED, id="blank-line-like-protobuf"),
    pytest.param("[unknown];main;fib 3\n", id="bracket-like-json"),
    pytest.param("{closure};main 3\n", id="brace-like-json"),
])
def test_folded_files_that_start_like_another_format_are_still_folded(text: str) -> None:
    loaded = detect.load(text.encode())
    assert loaded.format == "folded" and loaded.stacks == folded.parse(text)


def test_speedscope_evented_threads_and_units() -> None:
    document = {
        "shared": {"frames": [{"name": "main"}, {"name": "work", "file": "app.py", "line": 3},
                              {"name": "a;b\nc"}]},
        "profiles": [
            {"type": "evented", "name": "MainThread", "unit": "milliseconds", "startValue": 0,
             "endValue": 10, "events": [
                 {"type": "O", "frame": 0, "at": 0}, {"type": "O", "frame": 1, "at": 1.5},
                 {"type": "C", "frame": 1, "at": 4}, {"type": "C", "frame": 0, "at": 10}]},
            {"type": "sampled", "name": "worker", "unit": "milliseconds",
             "samples": [[0, 2]], "weights": [0.25]},
        ],
    }
    loaded = detect.load(json.dumps(document).encode())
    assert loaded.unit == "\u00b5s"
    assert loaded.stacks == {("MainThread", "main"): 7500,
                             ("MainThread", "main", "work (app.py:3)"): 2500,
                             ("worker", "main", "a:b c"): 250}


def _go_profile(tmp_path: Path) -> bytes:
    source = tmp_path / "main.go"
    source.write_text("""package main
import ("os"; "runtime/pprof"; "time")
//go:noinline
func burn(n int) int { s := 0; for i := 0; i < n; i++ { s += i * i % 7 }; return s }
func main() {
    out, _ := os.Create(os.Args[1]); pprof.StartCPUProfile(out)
    for end := time.Now().Add(400 * time.Millisecond); time.Now().Before(end); { burn(100000) }
    pprof.StopCPUProfile(); out.Close()
}
""")
    subprocess.run(["go", "run", str(source), str(tmp_path / "cpu.pb.gz")], check=True,
                   cwd=tmp_path, timeout=300, capture_output=True,
                   env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin",
                        "GOCACHE": str(Path.home() / ".cache" / "go-build"), "GOFLAGS": "-mod=mod",
                        "GO111MODULE": "off"})
    return (tmp_path / "cpu.pb.gz").read_bytes()


@pytest.mark.skipif(shutil.which("go") is None, reason="go is not installed (golang-go)")
def test_a_real_go_cpu_profile(tmp_path: Path) -> None:
    loaded = detect.load(_go_profile(tmp_path))
    assert loaded.format == "pprof" and loaded.unit == "ns"  # cpu/nanoseconds: the last type
    burning = {stack: count for stack, count in loaded.stacks.items() if "main.burn" in stack}
    assert sum(burning.values()) > sum(loaded.stacks.values()) / 2
    for stack in burning:  # root first: runtime.main, main.main, main.burn
        assert stack[0] == "runtime.main"
        assert stack.index("main.main") < stack.index("main.burn"), stack


BAD = [
    (b"", "folded stacks: no samples"),
    (b"garbage\n", "folded stacks: line 1: expected 'frame;frame;... COUNT'"),
    (b"\x00\x01binary", "pprof: field number 0"),
    (b"\xff\xfe\x00", "folded stacks: UTF-16 text that does not decode"),
    (b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03\xff\xff", "gzip: the data is corrupt"),
    (gzip.compress(FOLDED.encode())[:-12], "gzip: the data is truncated"),
    (b'{"a": 1}', "speedscope: JSON, but not a speedscope file"),
    (b"[" * 100_000, "folded stacks: line 1: expected 'frame;frame;... COUNT'"),
    (b'[1, 2]', "JSON, but not a speedscope file"),
    (b'{"profiles": [], "shared": {"frames": []}}', "no profiles"),
    (b'{"profiles": [{"type": "sampled", "samples": [[5]], "weights": [1]}], '
     b'"shared": {"frames": [{"name": "a"}]}}', "sample 0 is not a list of frame indices"),
    (b'{"profiles": [{"type": "sampled", "samples": [[0]], "weights": [NaN]}], '
     b'"shared": {"frames": [{"name": "a"}]}}', "weight 0 is not a non-negative number"),
    (b'{"profiles": [{"type": "evented", "events": [{"type": "C", "frame": 0, "at": 1}]}], '
     b'"shared": {"frames": [{"name": "a"}]}}', "neither opens nor closes"),
    (b'{"profiles": [{"type": "flat"}], "shared": {"frames": []}}', "neither 'sampled'"),
    (b"\x0a\x02\x08\x05", "pprof: not a profile"),  # a sample type, no string table
]


@pytest.mark.parametrize(("data", "message"), BAD, ids=[m for _, m in BAD])
def test_bad_input_says_what_is_wrong(data: bytes, message: str) -> None:
    with pytest.raises(InputError, match=".*") as raised:
        detect.load(data)
    assert message in str(raised.value) and "\n" not in str(raised.value)


def test_a_gzip_bomb_stops_at_the_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(detect, "MAX_INPUT", 1000)
    with pytest.raises(InputError, match="larger than"):
        detect.load(gzip.compress(b"a;b 1\n" * 10_000))


VALID = [folded.format_stacks(STACKS).encode(), speedscope.encode(STACKS, "x"),
         gzip.decompress(pprof.encode(STACKS)), pprof.encode(STACKS)]


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(VALID), st.data())
def test_mangled_inputs_only_ever_raise_input_error(valid: bytes, data: st.DataObject) -> None:
    position = data.draw(st.integers(0, len(valid)))
    cut = data.draw(st.integers(0, 8))
    insert = data.draw(st.binary(max_size=8))
    mangled = valid[:position] + insert + valid[position + cut:]
    try:
        loaded = detect.load(mangled)
    except InputError:
        return
    assert all(count > 0 and stack for stack, count in loaded.stacks.items())


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes_only_ever_raise_input_error(data: bytes) -> None:
    try:
        detect.load(data)
    except InputError:
        pass


# --- folded stacks as flamegraph.pl reads them ----------------------------------------------------

@pytest.mark.parametrize(("text", "stacks"), [
    pytest.param("main;fib 3\n 2\n", {("main", "fib"): 3, (): 2}, id="empty-stack-under-the-root"),
    pytest.param("main;fib 0.5\nmain;fib 1.25\nmain 2.\nx\t.5\n",
                 {("main", "fib"): 1.75, ("main",): 2.0, ("x",): 0.5}, id="fractional"),
    pytest.param("a;;b 1\na; 2\n;b 1\n", {("a", "", "b"): 1, ("a", ""): 2, ("", "b"): 1},
                 id="empty-frames-kept"),
    pytest.param("main;fib 3\r\nmain;gc 1\r\n", {("main", "fib"): 3, ("main", "gc"): 1},
                 id="crlf"),
    pytest.param("main;fib\t3\nmain;gc  \t 1  \n", {("main", "fib"): 3, ("main", "gc"): 1},
                 id="tabs-and-runs-of-blanks"),
    pytest.param("a b;c d 4\n", {("a b", "c d"): 4}, id="blanks-inside-frames"),
    pytest.param("main;fib 007\nmain 0\n", {("main", "fib"): 7}, id="leading-zeros-and-zero"),
    pytest.param("\ufeffmain;fib 3\n", {("main", "fib"): 3}, id="utf8-bom"),
    pytest.param("main;java_[j] 1500000\nmain;sys_[k] 250000\n",
                 {("main", "java_[j]"): 1500000, ("main", "sys_[k]"): 250000},
                 id="async-profiler-weighted"),
])
def test_folded_lines_real_tools_write(text: str, stacks: dict[tuple[str, ...], float]) -> None:
    loaded = detect.load(text.encode())
    assert loaded.format == "folded" and loaded.stacks == stacks and not loaded.warnings
    assert all(isinstance(count, int) for stack, count in loaded.stacks.items()
               if float(stacks[stack]).is_integer() and "." not in text)


def test_utf16_with_a_bom_is_read() -> None:
    loaded = detect.load("main;fib 3\r\n".encode("utf-16"))
    assert loaded.stacks == {("main", "fib"): 3}


def test_bytes_that_are_not_utf8_are_replaced_and_said() -> None:
    """A Latin-1 frame name in a folded file (once refused as a broken pprof profile)."""
    loaded = detect.load(b"main;caf\xe9 3\nmain;ok 1\nx;\xff\xfe 1\n")
    assert loaded.format == "folded"
    assert loaded.stacks == {("main", "caf\ufffd"): 3, ("main", "ok"): 1, ("x", "\ufffd\ufffd"): 1}
    assert loaded.warnings == (
        "3 invalid UTF-8 byte sequences replaced by U+FFFD \ufffd (the first on line 1)",)


def test_a_real_replacement_character_is_not_counted_as_replaced() -> None:
    loaded = detect.load("main;\ufffd 1\n".encode() + b"main;\xe9 1\n")
    assert loaded.warnings == (
        "1 invalid UTF-8 byte sequence replaced by U+FFFD \ufffd (the first on line 2)",)


@pytest.mark.parametrize(("data", "message"), [
    (b"main;fib 3\nmain;gc x\n", "folded stacks: line 2: expected 'frame;frame;... COUNT'"),
    (b"main;fib -3\n", "folded stacks: line 1: expected"),
    (b"main;fib 1e3\n", "folded stacks: line 1: expected"),
    (b"3\n", "folded stacks: line 1: expected"),  # no blank before the count: not ` 3`
    (b"main;fib 0\n", "folded stacks: no samples"),
    (b"main;fib " + b"9" * 5000 + b"\n", "folded stacks: line 1: count 9999"),
    (b";" * 5000 + b" 1\n", "folded stacks: line 1: a stack of 5001 frames, more than 4096"),
    (b"main;fib \xe9\n", "folded stacks: line 1: expected"),
    (b"{\"profiles\": [}",
     "neither speedscope JSON (Expecting value: line 1 column 15 (char 14)) nor folded stacks"),
])
def test_every_error_names_the_format_it_read(data: bytes, message: str) -> None:
    with pytest.raises(InputError) as raised:
        detect.load(data)
    assert message in str(raised.value), str(raised.value)


def test_the_frames_of_all_stacks_are_capped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("webhook.stacks.MAX_FRAMES", 10)
    assert detect.load(b"a;b;c 1\na;b;d 1\na;b;c 5\n").stacks[("a", "b", "c")] == 6
    with pytest.raises(InputError, match="folded stacks: more than 10 frames in all"):
        detect.load(b"a;b;c 1\na;b;d 1\na;b;e;f;g 1\n")
    with pytest.raises(InputError, match="pprof: more than 10 frames in all"):
        detect.load(pprof.encode({("a", "b", "c", "d", "e", "f"): 1, ("x",) * 6: 1}))


def test_deep_pprof_and_sampled_speedscope_stacks_are_refused() -> None:
    deep = {tuple(f"f{i}" for i in range(MAX_DEPTH + 1)): 1}
    with pytest.raises(InputError, match="pprof: sample 0: a stack of more than 4096"):
        detect.load(pprof.encode(deep))
    with pytest.raises(InputError, match="speedscope: profile 0: a stack of 4097 frames"):
        detect.load(speedscope.encode(deep, "deep"))


def test_an_empty_pprof_sample_counts_under_the_root() -> None:
    loaded = detect.load(pprof.encode({("main",): 2, (): 3}))
    assert loaded.stacks == {("main",): 2, (): 3}
