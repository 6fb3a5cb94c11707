"""Go binaries without symbols (`go build -ldflags="-s -w"`, as release builds are): their
functions, files, lines and inlined calls named from Go's own table (.gopclntab), checked
against what Go's and binutils' tools say of the same build with symbols. The binaries are the
sample app (samples/go) built here with the machine's Go (Debian 12: 1.19); Debian 13's Go 1.24
is checked from its sample image in tests/runtime/test_flamegraph_runtimes.py."""

from __future__ import annotations

import importlib
import os
import re
import shutil
import struct
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.unit.toolset.conftest import LIB, ROOT

SOURCE = ROOT / "samples" / "go" / "main.go"
GO = shutil.which("go")
pytestmark = pytest.mark.skipif(GO is None, reason="needs Go (Debian's golang-go)")


def toolset_modules() -> dict[str, ModuleType]:
    """The toolset's library modules this file tests (tests/runtime uses it too)."""
    if str(LIB) not in sys.path:
        sys.path.insert(0, str(LIB))
    return {name: importlib.import_module(name)
            for name in ("perf_data", "elf_frames", "stacks_unwind", "gopclntab")}


@pytest.fixture(scope="module")
def lib() -> dict[str, ModuleType]:
    return toolset_modules()


def go_build(out: Path, *flags: str, cgo: bool = False) -> Path:
    # Go's own build cache (~/.cache/go-build) makes the builds after the first quick.
    env = dict(os.environ, GO111MODULE="off", CGO_ENABLED="1" if cgo else "0", GOFLAGS="")
    subprocess.run([str(GO), "build", *flags, "-o", str(out), str(SOURCE)], env=env,
                   check=True, capture_output=True, timeout=600)
    return out


@pytest.fixture(scope="module")
def builds(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The sample built as users build it: plain, stripped (-s -w), and as a stripped PIE."""
    work = tmp_path_factory.mktemp("go")
    return {
        "exe": go_build(work / "exe"),
        "exe-stripped": go_build(work / "exe-stripped", "-ldflags=-s -w"),
        "pie": go_build(work / "pie", "-buildmode=pie"),
        "pie-stripped": go_build(work / "pie-stripped", "-buildmode=pie", "-ldflags=-s -w"),
    }


def load(lib: dict[str, ModuleType], path: Path) -> Any:
    """The file as the unwinder loads it (only the sections it reads)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        return lib["elf_frames"].load(fd, os.fstat(fd).st_size, path.name, 1 << 30)
    finally:
        os.close(fd)


def nm_functions(path: Path) -> dict[int, str]:
    """Address -> name of the text symbols `go tool nm` lists, as the table spells them: without
    the `.abi0` suffix of assembly functions, array lengths of generated names as `[...]` (Go's
    own tracebacks show them so); the linker's runtime.text/etext markers aside."""
    out = subprocess.run([str(GO), "tool", "nm", str(path)], check=True, capture_output=True,
                         text=True, timeout=120).stdout
    found = {}
    for line in out.splitlines():
        parts = line.split(None, 2)
        if len(parts) == 3 and parts[1] in "Tt" and parts[2] not in ("runtime.text",
                                                                      "runtime.etext"):
            name = parts[2].removesuffix(".abi0")
            found[int(parts[0], 16)] = re.sub(r"\[\d+\]", "[...]", name) \
                if name.startswith("type..") else name
    return found


def same_names(table: Any, functions: dict[int, str]) -> None:
    """The table names every function as `go tool nm` does (the table spells a generated
    name's separator `·` where newer symbol tables write `.`)."""
    named = {address: (table.function(address) or "").replace("·", ".")
             for address in functions}
    assert named == {address: name.replace("·", ".") for address, name in functions.items()}


def objdump_positions(path: Path) -> dict[int, tuple[str, int]]:
    """Address -> (file base name, line) of every instruction `go tool objdump` lists."""
    out = subprocess.run([str(GO), "tool", "objdump", str(path)], check=True,
                         capture_output=True, text=True, timeout=300).stdout
    found = {}
    for match in re.finditer(r"^\s+(\S+):(\d+)\t+0x([0-9a-f]+)\t", out, re.MULTILINE):
        found[int(match.group(3), 16)] = (match.group(1), int(match.group(2)))
    return found


def stripped_pairs() -> list[tuple[str, str]]:
    return [("exe-stripped", "exe"), ("pie-stripped", "pie"), ("exe", "exe")]


@pytest.mark.parametrize(("stripped", "reference"), stripped_pairs())
def test_every_function_is_named_as_the_symbol_table_names_it(
        lib: dict[str, ModuleType], builds: dict[str, Path], stripped: str,
        reference: str) -> None:
    elf = load(lib, builds[stripped])
    assert stripped == reference or not elf.has_symtab  # -s -w: no .symtab, the table stays
    table = elf.go_table()
    assert table is not None and table.version == lib["gopclntab"].GO118  # Go 1.19's layout
    functions = nm_functions(builds[reference])
    assert len(functions) > 1000
    same_names(table, functions)
    # Inside a function too, and nothing outside the table's range.
    fib = next(address for address, name in functions.items() if name == "main.fibRecursive")
    assert table.function(fib + 7) == "main.fibRecursive"
    assert table.function(0x1000) is None and table.function(1 << 60) is None


def test_every_instruction_has_the_file_and_line_objdump_shows(
        lib: dict[str, ModuleType], builds: dict[str, Path]) -> None:
    table = load(lib, builds["exe-stripped"]).go_table()
    positions = objdump_positions(builds["exe"])
    assert len(positions) > 50_000
    checked = 0
    for address, (file, line) in list(positions.items())[::5]:
        frames = table.frames(address)
        innermost = frames[0]  # objdump shows the position of inlined code, not its caller's
        assert (os.path.basename(innermost.file), innermost.line) == (file, line), hex(address)
        checked += 1
    assert checked > 10_000


def inlined_as_dwarf_records_them(table: Any, symbols: Path) -> list[list[str]]:
    """Check every level of inlining at addresses of `table` (a stripped build) against what
    binutils' addr2line reads from the DWARF of `symbols` (the same build with symbols): the
    same files and lines, and the same callers. Returns the inlined chains found (labels)."""
    addr2line = shutil.which("addr2line")
    if addr2line is None:
        pytest.skip("needs binutils' addr2line (Debian's binutils, which dpkg-dev pulls in)")
    starts = sorted(nm_functions(symbols))
    inlined = []
    for address in range(starts[0], starts[-1], 7):
        frames = table.frames(address)
        # Wrappers the compiler generates (<autogenerated>:1) have no DWARF to compare with.
        if frames is not None and len(frames) > 1 and all(
                frame.file != "<autogenerated>" for frame in frames):
            inlined.append((address, frames))
    assert len(inlined) > 5000
    assert max(len(frames) for _a, frames in inlined) >= 4
    sample = inlined[:: max(1, len(inlined) // 400)]
    out = subprocess.run([addr2line, "-i", "-f", "-a", "-e", str(symbols),
                          *(hex(address) for address, _frames in sample)], check=True,
                         capture_output=True, text=True, timeout=120).stdout
    recorded: dict[int, list[tuple[str, str]]] = {}
    current: list[tuple[str, str]] = []
    lines = out.splitlines()
    index = 0
    while index < len(lines):
        if lines[index].startswith("0x"):
            current = recorded.setdefault(int(lines[index], 16), [])
            index += 1
            continue
        current.append((lines[index], lines[index + 1]))
        index += 2
    for address, frames in sample:
        dwarf = recorded[address]
        assert [f"{frame.file}:{frame.line}" for frame in frames] == [
            position.split(" ")[0] for _name, position in dwarf], hex(address)
        # Each caller by name (addr2line names the innermost level after its outermost
        # function; the table names the inlined function itself).
        assert [frame.function for frame in frames[1:]] == [name for name, _ in dwarf[1:]]
    return [[frame.label() for frame in frames] for _a, frames in inlined]


def test_inlined_calls_are_frames_as_the_debug_info_records_them(
        lib: dict[str, ModuleType], builds: dict[str, Path]) -> None:
    table = load(lib, builds["exe-stripped"]).go_table()
    chains = inlined_as_dwarf_records_them(table, builds["exe"])
    # The sample's own: time.Duration.Seconds inlined into main.runRounds (main.go:49).
    assert any(len(chain) == 2 and chain[0].startswith("time.Duration.Seconds (")
               and chain[1] == f"main.runRounds ({SOURCE}:49)" for chain in chains)


def test_the_unwinder_names_a_stripped_go_binary(lib: dict[str, ModuleType],
                                                 builds: dict[str, Path]) -> None:
    """A frame-pointer chain through the stripped sample: each frame is the function with its
    file and line; calls inlined at an address become frames of their own."""
    perf_data, unwind = lib["perf_data"], lib["stacks_unwind"]
    path = builds["exe-stripped"]
    elf = load(lib, path)
    functions = {name: address for address, name in nm_functions(builds["exe"]).items()}
    base = 0x400000  # a static Go binary is mapped at its link-time addresses
    mapping = perf_data.Mapping(9, base, base + path.stat().st_size, 0, str(path), 1, 5)
    unwinder = unwind.Unwinder([mapping], lambda _mapping: elf, None, None)
    table = elf.go_table()
    seconds = next(address for address in range(functions["main.runRounds"],
                                                 functions["main.runRounds"] + 0x300)
                   if len(table.frames(address)) == 2)

    def position(address: int) -> str:
        frame = table.frames(address)[-1]
        return f"{frame.file}:{frame.line}"

    leaf = functions["main.fibRecursive"] + 0x20
    caller = functions["main.computeRound"] + 0x18
    chain = [leaf, caller + 1, seconds + 1]  # return addresses point after their call
    sample = perf_data.Sample(None, 9, 9, 0, leaf, 1, [], chain, {}, b"")
    names = [frame.name for frame in unwinder.unwind(sample)]
    assert names == [f"main.fibRecursive ({position(leaf)})",
                     f"main.computeRound ({position(caller)})",
                     table.frames(seconds)[0].label(),
                     f"main.runRounds ({SOURCE}:49)"]
    assert all(frame.named for frame in unwinder.unwind(sample))
    assert names[0].startswith(f"main.fibRecursive ({SOURCE}:")


def test_a_binary_with_symbols_keeps_its_symbol_names(lib: dict[str, ModuleType],
                                                      builds: dict[str, Path]) -> None:
    """.symtab first, as before: the table names only what a stripped binary cannot."""
    unwind = lib["stacks_unwind"]
    elf = load(lib, builds["exe"])
    assert elf.has_symtab and unwind.go_frame(elf, elf.go_table().entries[10]) is None


def test_the_text_start_from_the_moduledata_when_the_header_has_none(
        lib: dict[str, ModuleType], builds: dict[str, Path]) -> None:
    """Go >= 1.26 writes 0 as the header's textStart (so may an unrelocated PIE): the runtime's
    moduledata, found by its pointer to the table, has it; failing that, the .text section."""
    elf_frames = lib["elf_frames"]
    data = bytearray(builds["exe-stripped"].read_bytes())
    elf = elf_frames.ElfFile(bytes(data))
    offset = elf.sections[".gopclntab"][2]
    expected = {address: elf.go_table().function(address)
                for address in elf.go_table().entries[:-1:7]}
    struct.pack_into("<Q", data, offset + 24, 0)
    patched = elf_frames.ElfFile(bytes(data))
    assert {address: patched.go_table().function(address) for address in expected} == expected
    moduledata = patched.go_table()._moduledata_at()
    assert moduledata is not None
    data[moduledata : moduledata + 8] = b"\0" * 8  # no moduledata either: .text's address
    alone = elf_frames.ElfFile(bytes(data))
    assert {address: alone.go_table().function(address) for address in expected} == expected
    assert alone.go_table().gofunc() is None  # inline trees need it: the functions alone
    assert all(len(alone.go_table().frames(address)) == 1 for address in expected)


def test_a_table_no_section_names_is_found_by_its_header(
        lib: dict[str, ModuleType], builds: dict[str, Path], tmp_path: Path) -> None:
    """Linkers that merge the table into read-only data (an external link of a PIE puts it in
    .data.rel.ro, with no section of its own): found by its header, inline trees and all."""
    elf_frames = lib["elf_frames"]
    data = bytearray(builds["exe-stripped"].read_bytes())
    elf = elf_frames.ElfFile(bytes(data))
    expected = {address: elf.go_table().frames(address)
                for address in elf.go_table().entries[:-1:5]}
    # Rename .gopclntab (its header now names .gosymtab, which comes first and wins) and grow
    # .rodata over it, as a linker that merges the sections would.
    shoff, = struct.unpack_from("<Q", data, 40)
    shentsize, shnum = struct.unpack_from("<HH", data, 58)
    headers = {index: shoff + index * shentsize for index in range(shnum)}
    by_name = {name: headers[info[5]] for name, info in elf.sections.items()}
    name_of = struct.unpack_from("<I", data, by_name[".gosymtab"])[0]
    struct.pack_into("<I", data, by_name[".gopclntab"], name_of)
    rodata_addr, = struct.unpack_from("<Q", data, by_name[".rodata"] + 16)
    table_addr, = struct.unpack_from("<Q", data, by_name[".gopclntab"] + 16)
    table_size, = struct.unpack_from("<Q", data, by_name[".gopclntab"] + 32)
    struct.pack_into("<Q", data, by_name[".rodata"] + 32, table_addr + table_size - rodata_addr)
    merged = tmp_path / "merged"
    merged.write_bytes(bytes(data))
    loaded = load(lib, merged)
    assert ".gopclntab" not in loaded.sections
    assert {address: loaded.go_table().frames(address) for address in expected} == expected

    if shutil.which("gcc") is None:
        pytest.skip("an external link needs gcc (Debian's build-essential)")
    external = go_build(tmp_path / "external", "-buildmode=pie",
                        "-ldflags=-s -w -linkmode=external", cgo=True)
    reference = go_build(tmp_path / "external-symbols", "-buildmode=pie",
                         "-ldflags=-linkmode=external", cgo=True)
    loaded = load(lib, external)
    assert not {".gopclntab", ".data.rel.ro.gopclntab"} & set(loaded.sections)
    functions = {address: name for address, name in nm_functions(reference).items()
                 if loaded.go_table().index(address) is not None}
    assert len(functions) > 1000
    assert {address: loaded.go_table().function(address) for address in functions} == functions


# --- hostile tables ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def pristine(lib: dict[str, ModuleType], builds: dict[str, Path]) -> tuple[bytes, int, int]:
    """The stripped sample's bytes, and where its table lies (file offset, size)."""
    data = builds["exe-stripped"].read_bytes()
    section = lib["elf_frames"].ElfFile(data).sections[".gopclntab"]
    return data, section[2], section[3]


def probe(lib: dict[str, ModuleType], data: bytes) -> None:
    """Everything the unwinder asks of a table, on a few hundred addresses."""
    elf = lib["elf_frames"].ElfFile(data)
    table = elf.go_table()
    if table is None:
        return
    for address in list(range(0x401000, 0x487000, 0x1000)) + list(table.entries[:120]):
        found = table.frames(address)
        assert found is None or 1 <= len(found) <= 65
        table.function(address)
    assert table.gofunc() is None or isinstance(table.gofunc(), int)


FUZZ = settings(max_examples=80, deadline=timedelta(seconds=5), derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                       HealthCheck.data_too_large])


@FUZZ
@given(edits=st.lists(st.tuples(st.integers(0, 1 << 20), st.binary(min_size=1, max_size=8)),
                      min_size=1, max_size=24),
       header=st.booleans())
def test_a_corrupt_table_never_raises_or_hangs(lib: dict[str, ModuleType],
                                               pristine: tuple[bytes, int, int],
                                               edits: list[tuple[int, bytes]],
                                               header: bool) -> None:
    """Bytes overwritten anywhere in the table (or its header, its function table and the
    first _func records, where the offsets that steer every read are): names or None, in
    bounded time."""
    data, offset, size = pristine
    corrupt = bytearray(data)
    for where, value in edits:
        at = offset + (where % (0x2000 if header else size))
        corrupt[at : at + len(value)] = value
    started = time.monotonic()
    probe(lib, bytes(corrupt))
    assert time.monotonic() - started < 5


@FUZZ
@given(cut=st.integers(0, 1 << 24), field=st.integers(0, 8),
       value=st.sampled_from([0, 1, 7, 0xFFFFFFFF, 1 << 32, 1 << 63, (1 << 64) - 1]))
def test_a_truncated_table_or_absurd_header_never_raises(lib: dict[str, ModuleType],
                                                         pristine: tuple[bytes, int, int],
                                                         cut: int, field: int,
                                                         value: int) -> None:
    data, offset, size = pristine
    corrupt = bytearray(data)
    struct.pack_into("<Q", corrupt, offset + 8 + field * 8, value)
    probe(lib, bytes(corrupt))
    # The table cut short: the section header still says its full size.
    end = offset + cut % size
    probe(lib, bytes(data[:end]) + b"\0" * (len(data) - end))
    assert lib["gopclntab"].find(b"\xf1\xff\xff\xff\0\0\x01\x08", {
        ".gopclntab": (0, 0, 8)}, lambda _vaddr: None) is None
