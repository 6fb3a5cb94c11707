"""pprof as the results page's download and the exports write it: what a user downloads must
open in `go tool pprof`, with the samples the run recorded."""

from __future__ import annotations

import gzip
import subprocess
from pathlib import Path

from tests.unit.results.fake_sinks import go_pprof_raw
from tests.unit.stacks.test_folded import FOLDED
from webhook.stacks import folded, pprof

# --- pprof, read back by an independent decoder ---------------------------------------------

def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return result, pos


def _fields(data: bytes) -> list[tuple[int, int | bytes]]:
    out: list[tuple[int, int | bytes]] = []
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(data, pos)
            out.append((number, value))
        elif wire == 2:
            length, pos = _varint(data, pos)
            out.append((number, data[pos:pos + length]))
            pos += length
        else:
            raise AssertionError(f"unexpected wire type {wire}")
    return out


def _packed(data: bytes) -> list[int]:
    values, pos = [], 0
    while pos < len(data):
        value, pos = _varint(data, pos)
        values.append(value)
    return values


def decode_pprof(blob: bytes) -> dict[tuple[str, ...], int]:
    """Folded stacks from a gzip'd profile.proto (sample -> location -> line -> function)."""
    fields = _fields(gzip.decompress(blob))
    strings = [value.decode() for number, value in fields
               if number == 6 and isinstance(value, bytes)]
    functions: dict[int, str] = {}
    locations: dict[int, int] = {}
    samples: list[tuple[list[int], list[int]]] = []
    for number, value in fields:
        assert isinstance(value, bytes) or number not in (2, 4, 5)
        if number == 5 and isinstance(value, bytes):
            function = dict(_fields(value))
            functions[int(function[1])] = strings[int(function[2])]
        elif number == 4 and isinstance(value, bytes):
            location = _fields(value)
            ident = next(int(v) for n, v in location if n == 1)
            line = next(v for n, v in location if n == 4)
            assert isinstance(line, bytes)
            locations[ident] = int(dict(_fields(line))[1])
        elif number == 2 and isinstance(value, bytes):
            parts = dict(_fields(value))
            raw_ids, raw_counts = parts[1], parts[2]
            assert isinstance(raw_ids, bytes) and isinstance(raw_counts, bytes)
            samples.append((_packed(raw_ids), _packed(raw_counts)))
    assert strings[0] == ""
    stacks: dict[tuple[str, ...], int] = {}
    for ids, counts in samples:
        frames = tuple(functions[locations[i]] for i in reversed(ids))
        stacks[frames] = stacks.get(frames, 0) + counts[0]
    return stacks


def test_pprof_decodes_to_the_same_stacks() -> None:
    stacks = folded.parse(FOLDED)
    blob = pprof.encode(stacks, period_ns=10_101_010, comment="web-1")
    assert blob[:2] == b"\x1f\x8b"
    assert decode_pprof(blob) == stacks


def test_pprof_encodes_large_varints() -> None:
    stacks = {("a",): 300, ("a", "b"): 1 << 40}
    assert decode_pprof(pprof.encode(stacks)) == stacks


def test_go_tool_pprof_reads_it(tmp_path: Path) -> None:
    path = tmp_path / "profile.pb.gz"
    path.write_bytes(pprof.encode(folded.parse(FOLDED), period_ns=10_101_010))
    result = subprocess.run(["go", "tool", "pprof", "-top", "-nodecount=10", str(path)],
                            capture_output=True, text=True, timeout=120,
                            env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin",
                                 "GOCACHE": str(tmp_path / "cache"), "PPROF_TMPDIR":
                                 str(tmp_path)})
    assert result.returncode == 0, result.stderr
    top = {line.split()[-1]: line for line in result.stdout.splitlines() if line.strip()}
    assert "fib" in top and "io_wait" in top
    # 60 samples of 10.1 ms each: fib's flat time is 0.61 s (60 % of the total).
    assert "60.00%" in top["fib"], result.stdout


def test_go_tool_pprof_raw_has_every_sample_and_name(tmp_path: Path) -> None:
    """Go's own decoder, sample by sample: the names a JIT or an app may give its frames
    (spaces, quotes, non-ASCII, braces, a varint-sized count) come back exactly."""
    text = FOLDED + (
        "node;LazyCompile:*fibonacci /app/app.js:1:19;JS:~<anonymous> node:internal 7\n"
        "java;Interpreter;void com.example.Shop$Cart.add(java.lang.String) 3\n"
        "python;<module> (/app/main.py:3);écrire_données 2\n"
        "dotnet;System.Private.CoreLib!System.Threading.Tasks.Task`1[System.__Canon].Wait() 1\n"
        "perl;main::{closure};\"quoted\" 'name' %s %d 1\n"
        f"deep;{';'.join(f'f{i}' for i in range(200))} 1\n"
        "big;one 300000\n")
    stacks = folded.parse(text)
    decoded = go_pprof_raw(pprof.encode(stacks, period_ns=10_101_010, time_ns=10 ** 18,
                                        duration_ns=30 * 10 ** 9), tmp_path)
    assert decoded.stacks == stacks
    assert decoded.sample_type == "samples/count"
    assert decoded.header["Period"] == "10101010" and decoded.header["Duration"] == "30s"
    assert decoded.location_ids == list(range(1, len(decoded.location_ids) + 1))
