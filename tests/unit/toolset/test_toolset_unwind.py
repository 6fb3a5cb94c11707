"""The toolset's own unwinder: perf.data records, ELF call frame information, frame-pointer
chains through JIT code, the one frame that says why unwinding stopped, hostile names, and the
one-line reasons when perf may not run. Real containers and perf: tests/runtime."""

from __future__ import annotations

import os
import struct
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.unit.toolset.conftest import LIB

LIBC = Path("/lib/x86_64-linux-gnu/libc.so.6")


@pytest.fixture(scope="module")
def lib(common: ModuleType) -> dict[str, ModuleType]:
    import importlib

    assert str(LIB) in __import__("sys").path
    return {name: importlib.import_module(name)
            for name in ("perf_data", "elf_frames", "stacks_unwind", "recording")}


# --- a perf.data file written by the test -------------------------------------------------------

SAMPLE_TYPE = (1 << 16) | 1 | 2 | 4 | (1 << 8) | (1 << 5) | (1 << 12) | (1 << 13)
REGS_MASK = (1 << 6) | (1 << 7) | (1 << 8)  # bp, sp, ip
JIT_START, JIT_END = 0x7F0000000000, 0x7F0000100000
STACK_BASE = 0x7FFD00000000


def attr_bytes(sample_id: int, config: int = 0, stack_size: int = 8192) -> bytes:
    attr = bytearray(128)
    flags = 1 << 18  # sample_id_all
    struct.pack_into("<IIQQQQQ", attr, 0, 1, 128, config, 99, SAMPLE_TYPE, 0, flags)
    struct.pack_into("<QQI", attr, 72, 0, REGS_MASK, stack_size)
    return bytes(attr)


def record(kind: int, misc: int, body: bytes) -> bytes:
    return struct.pack("<IHH", kind, misc, 8 + len(body)) + body


def trailer(pid: int, tid: int, time: int, ident: int = 1) -> bytes:
    return struct.pack("<IIQQ", pid, tid, time, ident)


def mmap2(pid: int, start: int, end: int, name: str, prot: int = 5) -> bytes:
    body = struct.pack("<IIQQQIIQQII", pid, pid, start, end - start, 0, 0, 0, 0, 0, prot, 2)
    raw = name.encode() + b"\0"
    raw += b"\0" * (-len(raw) % 8)
    return record(10, 0, body + raw + trailer(pid, pid, 0))


def sample(pid: int, time: int, ip: int, bp: int, sp: int, stack: bytes,
           kernel: list[int] | None = None, ident: int = 1) -> bytes:
    chain = [0xFFFFFFFFFFFFFF80, *kernel] if kernel else []
    body = struct.pack("<QQIIQQ", ident, ip, pid, pid, time, 10101010)
    body += struct.pack(f"<Q{len(chain)}Q", len(chain), *chain)
    body += struct.pack("<QQQQ", 2, bp, sp, ip)  # abi 64, then bp, sp, ip (mask order)
    padded = stack + b"\0" * (-len(stack) % 8)
    body += struct.pack("<Q", len(padded)) + padded + struct.pack("<Q", len(stack))
    return record(9, 2, body)


def perf_file(records: list[bytes], attrs: list[tuple[bytes, list[int]]]) -> bytes:
    header_size = 104
    attr_entries = b""
    ids_blob = b""
    ids_offset = header_size + len(attrs) * (128 + 16)
    for attr, ids in attrs:
        attr_entries += attr + struct.pack("<QQ", ids_offset + len(ids_blob), 8 * len(ids))
        ids_blob += struct.pack(f"<{len(ids)}Q", *ids)
    data_offset = ids_offset + len(ids_blob)
    data = b"".join(records)
    header = b"PERFILE2" + struct.pack("<QQQQQQQQ", header_size, 128 + 16, header_size,
                                       len(attr_entries), data_offset, len(data), 0, 0)
    header += b"\0" * (header_size - len(header))
    return header + attr_entries + ids_blob + data


def fp_stack(frames: list[int]) -> tuple[bytes, int]:
    """A stack holding a frame-pointer chain: each frame is (saved rbp, return address);
    the outermost saved rbp is 0. Returns (stack bytes from STACK_BASE, first rbp)."""
    words: list[int] = [0, 0]  # the leaf's own locals
    for index, return_address in enumerate(frames):
        next_frame = STACK_BASE + 8 * (len(words) + 2) if index < len(frames) - 1 else 0
        words += [next_frame, return_address]
    return struct.pack(f"<{len(words)}Q", *words), STACK_BASE + 16


def test_perf_data_records_and_a_frame_pointer_chain_through_jit_code(
        lib: dict[str, ModuleType]) -> None:
    perf_data, unwind = lib["perf_data"], lib["stacks_unwind"]
    stack, bp = fp_stack([JIT_START + 0x210, JIT_START + 0x310, JIT_START + 0x410])
    content = perf_file([
        mmap2(7, JIT_START, JIT_END, "//anon", prot=7),
        sample(7, 100, JIT_START + 0x110, bp, STACK_BASE, stack),
        record(14, 1 << 13 | 1 << 14, trailer(7, 7, 150)),  # switched out, preempted
        record(14, 0, trailer(7, 7, 400)),
    ], [(attr_bytes(1), [1])])
    parsed = perf_data.PerfData(content)
    records = list(parsed.records())
    mappings = [r for r in records if isinstance(r, perf_data.Mapping)]
    samples = [r for r in records if isinstance(r, perf_data.Sample)]
    switches = [r for r in records if isinstance(r, perf_data.Switch)]
    assert [(m.filename, m.start, m.end) for m in mappings] == [("//anon", JIT_START, JIT_END)]
    assert samples[0].regs[6] == bp and samples[0].regs[7] == STACK_BASE
    assert [(s.out, s.preempt, s.time) for s in switches] == [(True, True, 150),
                                                              (False, False, 400)]
    perf_map = unwind.PerfMap(
        f"{JIT_START + 0x100:x} 40 JS:*leaf /app/a.js:1\n"
        f"{JIT_START + 0x200:x} 40 JS:*middle /app/a.js:2\n"
        f"{JIT_START + 0x300:x} 40 JS:*outer\x1b[31m /app/a.js:3\n"
        f"{JIT_START + 0x400:x} 40 JS:main;x</script><img src=x onerror=alert(1)>.js\n"
        "garbage line\n".encode())
    unwinder = unwind.Unwinder(mappings, lambda mapping: None, perf_map, None)
    frames = unwinder.unwind(samples[0])
    assert [f.name for f in frames] == [
        "JS:*leaf /app/a.js:1", "JS:*middle /app/a.js:2", "JS:*outer\\x1b[31m /app/a.js:3",
        "JS:main:x</script><img src=x onerror=alert(1)>.js"]
    assert all(f.named for f in frames)
    assert unwinder.dsos[("//anon", 0)].methods == {"frame-pointer"}


def test_a_broken_frame_pointer_chain_becomes_one_frame_that_says_so(
        lib: dict[str, ModuleType]) -> None:
    perf_data, unwind = lib["perf_data"], lib["stacks_unwind"]
    stack = struct.pack("<4Q", 0, 0, 0x1234, JIT_START + 0x210)  # saved rbp is garbage
    content = perf_file([mmap2(7, JIT_START, JIT_END, "//anon", prot=7),
                         sample(7, 1, JIT_START + 0x110, STACK_BASE + 16, STACK_BASE, stack)],
                        [(attr_bytes(1), [1])])
    records = list(perf_data.PerfData(content).records())
    mappings = [r for r in records if isinstance(r, perf_data.Mapping)]
    unwinder = unwind.Unwinder(mappings, lambda mapping: None,
                               unwind.PerfMap(f"{JIT_START + 0x100:x} 400 hot\n".encode()), None)
    frames = unwinder.unwind(next(r for r in records if isinstance(r, perf_data.Sample)))
    assert [f.name for f in frames] == ["hot", "hot",
                                        "[unwind stopped: JIT has no frame pointers]"]
    folded = unwind.Folded()
    folded.add(frames, 1)
    assert folded.text() == "[unwind stopped: JIT has no frame pointers];hot;hot 1\n"
    assert folded.named_share == pytest.approx(2 / 3)
    assert folded.stopped == 1


def test_stacks_deeper_than_the_copy_say_so(lib: dict[str, ModuleType]) -> None:
    perf_data, unwind = lib["perf_data"], lib["stacks_unwind"]
    stack, bp = fp_stack([JIT_START + 0x210] * 40)
    cut = stack[:256]  # perf asked for 256 bytes: the rest of the stack is not in the sample
    content = perf_file([mmap2(7, JIT_START, JIT_END, "//anon", prot=7),
                         sample(7, 1, JIT_START + 0x110, bp, STACK_BASE, cut)],
                        [(attr_bytes(1, stack_size=256), [1])])
    records = list(perf_data.PerfData(content).records())
    unwinder = unwind.Unwinder([r for r in records if isinstance(r, perf_data.Mapping)],
                               lambda mapping: None,
                               unwind.PerfMap(f"{JIT_START:x} 1000 f\n".encode()), None)
    frames = unwinder.unwind(next(r for r in records if isinstance(r, perf_data.Sample)))
    assert frames[-1].name == "[unwind stopped: stack deeper than the 0.25 KiB copied]"
    assert 10 < len(frames) < 20
    # Where the kernel copied less than asked, the stack's mapping ended: the outermost frame.
    content = perf_file([mmap2(7, JIT_START, JIT_END, "//anon", prot=7),
                         sample(7, 1, JIT_START + 0x110, bp, STACK_BASE, cut)],
                        [(attr_bytes(1, stack_size=8192), [1])])
    records = list(perf_data.PerfData(content).records())
    frames = unwinder.unwind(next(r for r in records if isinstance(r, perf_data.Sample)))
    assert not frames[-1].name.startswith("[unwind stopped")


def test_truncated_and_foreign_files(lib: dict[str, ModuleType]) -> None:
    perf_data = lib["perf_data"]
    stack, bp = fp_stack([JIT_START + 0x210])
    content = perf_file([mmap2(7, JIT_START, JIT_END, "//anon"),
                         sample(7, 1, JIT_START, bp, STACK_BASE, stack)], [(attr_bytes(1), [1])])
    # perf killed mid-write: the last record is cut; the records before it still read.
    cut = list(perf_data.PerfData(content[:-20]).records())
    assert [type(r).__name__ for r in cut] == ["Mapping"]
    with pytest.raises(perf_data.PerfDataError):
        perf_data.PerfData(b"not perf data" * 20)


def test_off_cpu_waits_pair_switch_out_with_the_next_switch_in(
        lib: dict[str, ModuleType]) -> None:
    perf_data, recording = lib["perf_data"], lib["recording"]
    attr = perf_data.Attr(1, 3, 0, 0, True, 0, 0, False)

    def switch_sample(tid: int, time: int) -> Any:
        return perf_data.Sample(attr, 1, tid, time, 0, 1, [], [], {}, b"")

    records = [switch_sample(5, 100), perf_data.Switch(1, 5, 101, True, False),
               switch_sample(6, 110), perf_data.Switch(1, 6, 111, True, True),
               perf_data.Switch(1, 5, 5101, False), perf_data.Switch(1, 6, 211, False),
               switch_sample(5, 9000)]  # never switched back in: no wait
    assert recording.off_cpu_waits(records) == {(5, 100): (5001, False), (6, 110): (101, True)}


# --- ELF call frame information, on the machine's own libc ----------------------------------------

@pytest.fixture(scope="module")
def libc(lib: dict[str, ModuleType]) -> Any:
    elf_frames = lib["elf_frames"]
    fd = os.open(LIBC, os.O_RDONLY)
    try:
        return elf_frames.load(fd, os.fstat(fd).st_size, str(LIBC), 1 << 32)
    finally:
        os.close(fd)


def test_cfi_at_every_function_entry_is_the_call_frame(libc: Any,
                                                       lib: dict[str, ModuleType]) -> None:
    """At a function's first instruction the return address is at the stack pointer: CFA =
    rsp + 8, return address at CFA - 8. Checked over libc's exported functions."""
    elf_frames = lib["elf_frames"]
    starts, _sizes, names = libc._load_symbols()
    checked = 0
    for start, name_offset in list(zip(starts, names, strict=True))[::25]:
        name = libc._name(name_offset)
        row = libc.row(start)
        if row is None:
            continue  # a few assembly functions have no CFI
        assert (row.cfa_reg, row.cfa_offset) == (elf_frames.RSP, 8), name
        assert row.rules[elf_frames.RA].kind == "offset"
        assert row.rules[elf_frames.RA].value == -8, name
        assert libc.symbol(start) == name.split("@")[0]
        checked += 1
    assert checked > 50
    assert libc.has_cfi and not libc.is_go and len(libc.build_id()) == 40


def _hidden_functions(elf: Any, wanted: int) -> list[int]:
    """Starts of functions libc has CFI for but no symbol (static functions of a stripped
    library, like the node sample's uv__run_check in libuv1)."""
    table, hdr_addr, count, _encoding, _eh_frame = elf._eh_frame_hdr()
    found = []
    for index in range(0, count, 7):
        (relative,) = struct.unpack_from("<i", elf.data, table + index * 8)
        start = (relative + hdr_addr) & 0xFFFFFFFFFFFFFFFF
        if elf.symbol(start) is None and elf.symbol(start + 1) is None:
            found.append(start)
            if len(found) == wanted:
                break
    return found


def _libc_unwinder(libc: Any, lib: dict[str, ModuleType]) -> tuple[Any, Any]:
    """An unwinder for a process with all of libc mapped at one base, and the function
    giving the process's address of a libc link-time address."""
    perf_data, unwind = lib["perf_data"], lib["stacks_unwind"]
    base = 0x7F1000000000
    mapping = perf_data.Mapping(7, base, base + LIBC.stat().st_size, 0, str(LIBC), 1, 5)

    def address(vaddr: int) -> int:
        for vstart, _memsz, offset, filesz in libc.loads:
            if vstart <= vaddr < vstart + filesz:
                return int(base + vaddr - vstart + offset)
        raise AssertionError(f"{vaddr:#x} is in no loaded segment")

    return unwind.Unwinder([mapping], lambda _mapping: libc, None, None), address


def test_a_hidden_function_is_its_library_and_start(libc: Any,
                                                    lib: dict[str, ModuleType]) -> None:
    """A function a stripped library does not name shows as `[libc.so.6+0xSTART]`: stacks
    through different hidden functions stay apart, and the start resolves with the library's
    debug symbols. A run of them (they call each other) is one `[libc.so.6]` frame."""
    perf_data = lib["perf_data"]
    first, second, third = _hidden_functions(libc, 3)
    assert libc.function_start(first + 5) == first
    assert libc.function_start(0) is None  # the ELF header: no function
    unwinder, address = _libc_unwinder(libc, lib)
    exported = next(start for start in libc._load_symbols()[0][::50]
                    if libc.row(start) is not None and libc.symbol(start + 3) is not None)

    def unwound(*vaddrs: int) -> list[str]:
        chain = [address(vaddr) + 1 for vaddr in vaddrs]  # return addresses: after the call
        chain[0] -= 1  # the leaf is the sampled instruction itself
        stack = perf_data.Sample(None, 7, 7, 0, chain[0], 1, [], chain, {}, b"")
        return [frame.name for frame in unwinder.unwind(stack)]

    label = f"[{LIBC.name}+{{:#x}}]".format
    name = libc.symbol(exported + 3)
    assert unwound(first + 4, exported + 3, second + 4) == [label(first), name, label(second)]
    assert unwound(first + 4, first + 9, exported + 3) == [label(first), name]  # recursion
    assert unwound(first + 4, second + 4, third + 4, exported + 3) == [f"[{LIBC.name}]", name]


def test_malformed_elf_input_is_refused_not_raised(lib: dict[str, ModuleType]) -> None:
    elf_frames = lib["elf_frames"]
    with pytest.raises(elf_frames.ElfError):
        elf_frames.ElfFile(b"#!/bin/sh\n" * 10)
    head = LIBC.read_bytes()[:8192]  # section headers point past the end
    elf = elf_frames.ElfFile(head + b"\0" * 64)
    assert elf.row(0x28000) is None
    assert elf.symbol(0x28000) is None


def test_cfa_expressions_of_plt_entries(lib: dict[str, ModuleType]) -> None:
    elf_frames = lib["elf_frames"]
    # DW_OP_breg7 8; DW_OP_breg16 0; DW_OP_lit15; DW_OP_and; DW_OP_lit11; DW_OP_ge;
    # DW_OP_lit3; DW_OP_shl; DW_OP_plus: what every x86_64 .plt's FDE says.
    plt = bytes([0x77, 8, 0x80, 0, 0x3F, 0x1A, 0x3B, 0x2A, 0x33, 0x24, 0x22])
    assert elf_frames.evaluate_cfa_expression(plt, {7: 0x1000, 16: 0x4010}) == 0x1008
    assert elf_frames.evaluate_cfa_expression(plt, {7: 0x1000, 16: 0x401C}) == 0x1010
    assert elf_frames.evaluate_cfa_expression(bytes([0x06]), {}) is None  # deref: unsupported


# --- names --------------------------------------------------------------------------------------

def test_names_are_data_for_the_folded_file(lib: dict[str, ModuleType]) -> None:
    unwind = lib["stacks_unwind"]
    assert unwind.clean_name("a;b\nc\r\x07") == "a:b\\nc\\r\\x07"
    assert len(unwind.clean_name("x" * 100_000)) == unwind.MAX_NAME + 3
    assert unwind.clean_name("") == "[empty name]"
    assert unwind.strip_parameters("v8::Function::Call(v8::Local<v8::Context>) const") == (
        "v8::Function::Call")
    assert unwind.strip_parameters("f(int) [clone .constprop.1]") == "f"
    assert unwind.strip_parameters("std::less<int>::operator()(int, int)") == (
        "std::less<int>::operator()")
    demangle = unwind.Demangler()
    assert demangle("_ZN4node5StartEiPPc") == "node::Start"
    assert demangle("_Znot a mangled name") == "_Znot a mangled name"


def test_pyspy_frames(lib: dict[str, ModuleType]) -> None:
    recording = lib["recording"]
    assert recording.pyspy_frame("fib (cpu.py:3)").named
    assert not recording.pyspy_frame("0x7f434cd6424a (libc.so.6)").named


# --- one line that says why perf cannot run ---------------------------------------------------

def app(common: ModuleType, uid: int) -> Any:
    return common.Process(pid=4242, comm="node", cmdline=["node"], start_ticks=1, cgroup="",
                          uid=uid)


@pytest.fixture
def sidecar(monkeypatch: pytest.MonkeyPatch, common: ModuleType) -> Any:
    def configure(caps: set[str], paranoid: str = "2", attached: bool = False) -> None:
        monkeypatch.setattr(common, "capabilities", lambda: caps)
        original = common.read_text
        monkeypatch.setattr(common, "read_text", lambda path: paranoid + "\n" if path.endswith(
            "perf_event_paranoid") else original(path))
        monkeypatch.setattr(os, "geteuid", lambda: 0)
        if attached:
            monkeypatch.setenv("SIDECAR_DEBUG_ATTACHED", "true")
        else:
            monkeypatch.delenv("SIDECAR_DEBUG_ATTACHED", raising=False)
    return configure


def test_another_uid_without_ptrace_is_one_line(sidecar: Any, common: ModuleType,
                                                lib: dict[str, ModuleType]) -> None:
    recording = lib["recording"]
    sidecar(set(), attached=True)
    with pytest.raises(recording.RecordingFailed) as failure:
        recording.perf_access(app(common, 10001))
    message = failure.value.message
    assert failure.value.reason == "ptrace" and failure.value.code == 4
    assert "uid 10001" in message and "uid 0" in message and "CAP_SYS_PTRACE" in message
    assert "1.23" in message and "\n" not in message
    assert failure.value.as_meta()["error"]["reason"] == "ptrace"


def test_paranoid_two_without_perfmon_falls_back_to_user_space(
        sidecar: Any, common: ModuleType, lib: dict[str, ModuleType]) -> None:
    recording = lib["recording"]
    sidecar({"SYS_PTRACE"})
    access = recording.perf_access(app(common, 10001))
    assert access.user_only and "user-space only" in access.note
    assert "perf_event_paranoid is 2" in access.note
    sidecar({"SYS_PTRACE"}, paranoid="3")
    with pytest.raises(recording.RecordingFailed) as failure:
        recording.perf_access(app(common, 10001))
    assert failure.value.reason == "paranoid" and "perf_event_paranoid is 3" in str(failure.value)
    sidecar({"PERFMON", "SYS_PTRACE"}, paranoid="3")
    assert not recording.perf_access(app(common, 10001)).user_only


# --- cost of off-CPU and wall recordings (issue 23, item 8) -----------------------------------

def test_kernel_symbols_text_only_hidden_addresses_skipped(lib: dict[str, ModuleType]) -> None:
    unwind = lib["stacks_unwind"]
    table = unwind.Kallsyms(b"ffffffff81000000 T _stext\n"
                            b"ffffffff81000100 d some_data\n"  # data: never a frame
                            b"ffffffff81000200 t schedule\n"
                            b"ffffffffc0000000 t ext4_read\t[ext4]\n"
                            b"0000000000000000 T hidden_by_kptr_restrict\n")
    assert table.lookup(0xFFFFFFFF81000150) == "_stext"
    assert table.lookup(0xFFFFFFFF81000200) == "schedule"
    assert table.lookup(0xFFFFFFFFC0000010) == "ext4_read"
    assert table.lookup(0x1000) is None
    # kptr_restrict shows every address as zero: no table, kernel frames stay [kernel].
    assert not unwind.Kallsyms(b"0000000000000000 T _stext\n0000000000000000 t schedule\n").starts


def test_switches_copy_the_off_cpu_stack_size_in_wall_too(lib: dict[str, ModuleType]) -> None:
    recording = lib["recording"]
    access = recording.Access(user_only=False, facts=None)

    def command(kind: str) -> list[str]:
        options = recording.Options(target=recording.common.Process(
            1234, "app", ["app"], 0, "", 0), type=kind)
        # the modules are loaded at run time (Any to mypy): perf_command says list[str]
        argv: list[str] = recording.perf_command(
            "perf", options, access, "/tmp/d", False)  # noqa: S108
        return argv

    switch = f"context-switches/period=1,call-graph=dwarf,stack-size={recording.OFFCPU_STACK}/"
    wall = command("wall")
    assert switch in wall and f"dwarf,{recording.DWARF_STACK}" in wall  # cpu-clock: the deep copy
    assert switch in command("offcpu")
    assert not any("context-switches" in part for part in command("cpu"))
    assert "per switch" in recording.callgraph_text("wall")


def test_phases_count_the_cpu_of_waited_children(lib: dict[str, ModuleType]) -> None:
    import subprocess
    import sys

    phases = lib["recording"].Phases()
    subprocess.run([sys.executable, "-c", "sum(range(3_000_000))"], check=True)  # noqa: S603
    phases.done("perf")
    phases.done("unwind")
    assert phases.cpu["perf"] > 0.01 and phases.wall["perf"] >= phases.cpu["perf"] / 4
    assert set(phases.wall) == set(phases.cpu) == {"perf", "unwind"}


def test_the_summary_says_whose_symbols_are_missing(lib: dict[str, ModuleType]) -> None:
    """Many unnamed frames: one line naming the binaries (the most first) and the fix; a
    binary's name is the app's text, shown escaped."""
    unwind, recording = lib["stacks_unwind"], lib["recording"]
    frame = unwind.Frame
    folded = unwind.Folded()
    stack = [frame("main", True), frame("[nginx+0x10]", False, "nginx"),
             frame("[nginx+0x20]", False, "nginx"), frame("[libz\x1b[2J.so+0x1]", False,
                                                          "libz\x1b[2J.so")]
    folded.add(list(reversed(stack)), 10)
    line = recording.missing_symbols(folded, debuginfod=False)
    assert line == ("75 % of the frames are unnamed, in nginx 50 %, libz\\x1b[2J.so 25 % of "
                    "the frames: no symbol table here names them; with the chart's "
                    "toolset.debuginfod.urls (Debian: https://debuginfod.debian.net) the "
                    "toolset fetches their debug files by build-id")
    assert "debuginfod servers (DEBUGINFOD_URLS) had" in str(
        recording.missing_symbols(folded, debuginfod=True))
    named = unwind.Folded()
    named.add([frame("f", True)] * 19 + [frame("[x+0x1]", False, "x")], 1)
    assert recording.missing_symbols(named, debuginfod=False) is None  # 95 % named
