# ruff: noqa: S108  (names /tmp/perf-PID.map, the JIT runtimes' convention; nothing is opened here)
"""Samples of perf.data -> named stacks: unwinding per binary, symbols, one-pass folding.

Per frame, the binary the address falls in decides how to find the caller:
- a binary with CFI (.eh_frame, as every Debian binary and library has, frame pointers or not):
  the DWARF rules for that address, applied to the registers and the copy of the user stack the
  sample carries (`perf record --call-graph dwarf`);
- code without CFI (JIT code of Node, Java, Python's perf trampolines, which keep frame
  pointers; Go binaries, which always keep them): the frame-pointer chain.
This is what libdw does and perf's libunwind-based `perf script` does not (it stops at the first
JIT frame). Where neither works, the rest of the stack becomes ONE frame that says why
(`[unwind stopped: libfoo.so has no frame pointers]`), instead of a tower of `[unknown]`.

Symbols come from the binaries as the app's mount namespace has them (the caller opens them
safely, see recording.py), JIT names from the app's perf map, kernel names from /proc/kallsyms
when it shows addresses. All names are the app's data: stored with control characters escaped
and `;` (the folded separator) replaced, never interpreted.
"""

from __future__ import annotations

import bisect
import ctypes
import ctypes.util
import re
import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import elf_frames
import perf_data
from elf_frames import RA, RBP, RSP, ElfFile, Rule

MAX_DEPTH = 512
MAX_NAME = 2048  # longer names (a hostile map line) are cut: a frame is not a document
KERNEL_SUFFIX = "_[k]"  # flamegraph.pl's mark for kernel frames
CALLEE_SAVED = {3, RBP, 12, 13, 14, 15}

# Python >= 3.12's perf trampolines (`py::NAME:FILE` in the perf map) keep no frame pointer and
# have no CFI, but all have one shape (CPython's Python/asm_trampoline.S, x86_64: `sub $8,%rsp;
# call *%rcx; add $8,%rsp; ret`): at the return address of their call, the caller's return
# address is 16 bytes above the stack pointer, rbp untouched.
PYTHON_TRAMPOLINE = "py::"
TRAMPOLINE_ROW = elf_frames.Row(cfa_reg=RSP, cfa_offset=16, cfa_expr=None,
                                rules={RA: Rule("offset", -8)})

# How a binary's frames were unwound (meta.json `unwinding`).
CFI = "dwarf-cfi"
FRAME_POINTER = "frame-pointer"


@dataclass
class Frame:
    name: str
    named: bool | None  # None: our own annotation ([on CPU]), outside the named share
    library: str = ""  # an unnamed frame's binary: runs of them become one frame
    # Functions the compiler inlined at this address, innermost first: frames of their own
    # (Go's table records them), placed before this one.
    inlined: tuple[str, ...] = ()


@dataclass
class Dso:
    """One mapped file (or JIT region) as the unwinder uses it."""

    label: str  # short name for messages and unnamed frames (libnode.so.108, JIT, [vdso])
    elf: ElfFile | None = None
    jit: bool = False
    methods: set[str] = field(default_factory=set)


class PerfMap:
    """/tmp/perf-PID.map: `START SIZE name` lines (hex), written by JIT runtimes."""

    def __init__(self, content: bytes) -> None:
        entries: dict[int, tuple[int, str]] = {}
        for raw in content.splitlines():
            parts = raw.split(b" ", 2)
            if len(parts) != 3:
                continue
            try:
                start, size = int(parts[0], 16), int(parts[1], 16)
            except ValueError:
                continue
            entries[start] = (size, parts[2].decode("utf-8", "replace"))  # later lines win
        ordered = sorted(entries.items())
        self.starts = [start for start, _ in ordered]
        self.entries = [entry for _, entry in ordered]

    def __len__(self) -> int:
        return len(self.starts)

    def lookup(self, address: int) -> str | None:
        index = bisect.bisect_right(self.starts, address) - 1
        # A few steps back: a later, larger entry may cover an address past a smaller one.
        for candidate in range(index, max(index - 4, -1), -1):
            size, name = self.entries[candidate]
            if self.starts[candidate] <= address < self.starts[candidate] + size:
                return name
        return None


class Kallsyms:
    """/proc/kallsyms' text symbols. The addresses stay as the file writes them, 16 lower-case
    hex digits, whose order is their numeric order: one regular expression over the file and
    one sort, no int() per line (121,000 lines: 0.09 s instead of 0.12 s, far less under
    contention). A name is decoded when a sample needs it."""

    LINE = re.compile(rb"^([0-9a-f]{16}) [tTwW] (\S+)", re.MULTILINE)
    HIDDEN = b"0" * 16  # kptr_restrict: every address shows as zero

    def __init__(self, text: bytes | None) -> None:
        symbols = [found for found in self.LINE.findall(text or b"") if found[0] != self.HIDDEN]
        symbols.sort()
        self.starts = [address for address, _ in symbols]
        self.names = [name for _, name in symbols]

    def lookup(self, address: int) -> str | None:
        index = bisect.bisect_right(self.starts, b"%016x" % address) - 1
        return self.names[index].decode("utf-8", "replace") if index >= 0 else None


def clean_name(name: str) -> str:
    """A name as a folded frame can carry it: `;` replaced, control characters escaped, cut."""
    name = name.replace(";", ":")
    if not name.isprintable():
        name = "".join(c if c.isprintable() else ascii(c)[1:-1] for c in name)
    if len(name) > MAX_NAME:
        name = name[:MAX_NAME] + "..."
    return name or "[empty name]"


class Demangler:
    """C++ names through libstdc++'s __cxa_demangle (what perf does too), parameters dropped."""

    def __init__(self) -> None:
        self._fn: Callable[..., int] | None = None
        self._free: Callable[..., None] | None = None
        self._cache: dict[str, str] = {}
        try:
            lib = ctypes.CDLL(ctypes.util.find_library("stdc++") or "libstdc++.so.6")
            libc = ctypes.CDLL(None)
            fn = getattr(lib, "__cxa_demangle")  # noqa: B009 (a name Python would mangle)
            fn.restype = ctypes.c_void_p
            fn.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p,
                           ctypes.POINTER(ctypes.c_int)]
            free = libc.free
            free.argtypes = [ctypes.c_void_p]
            self._fn, self._free = fn, free
        except (OSError, AttributeError):
            pass

    def __call__(self, name: str) -> str:
        if not name.startswith("_Z") or self._fn is None or self._free is None:
            return name
        cached = self._cache.get(name)
        if cached is not None:
            return cached
        status = ctypes.c_int(0)
        pointer = self._fn(name.encode("utf-8", "replace"), None, None, ctypes.byref(status))
        result = name
        if pointer and status.value == 0:
            result = strip_parameters(
                ctypes.string_at(pointer).decode("utf-8", "replace"))
            self._free(pointer)
        self._cache[name] = result
        return result


def strip_parameters(name: str) -> str:
    """`ns::f(int, char**) const` -> `ns::f`: the parameter list is noise in a flame graph."""
    text = re.sub(r"( \[clone [^\]]*\])+$", "", name)  # gcc's specialised copies
    text = re.sub(r"\s*(const|volatile|&|&&|noexcept)\s*$", "", text)
    if not text.endswith(")"):
        return name
    depth = 0
    for index in range(len(text) - 1, -1, -1):
        char = text[index]
        if char == ")":
            depth += 1
        elif char == "(":
            depth -= 1
            if depth == 0:
                head = text[:index]
                # `operator()` keeps its own parentheses
                return head if head and not head.endswith("operator") else name
    return name


class Stack:
    """The copy of the user stack a sample carries, from its stack pointer up."""

    def __init__(self, base: int, data: bytes, complete: bool = False) -> None:
        self.base = base
        self.data = data
        # Reads at 8-byte steps from the base (nearly all of them) index the copy as words.
        self.words = memoryview(data)[: len(data) & ~7].cast("Q")
        self.last = len(data) - 8
        # The kernel copied less than asked: the copy ends where the stack's mapping ends, so
        # nothing lies beyond it (no "deeper than the copy").
        self.complete = complete

    def read(self, address: int) -> int | None:
        offset = address - self.base
        if offset < 0 or offset > self.last:
            return None
        if not offset & 7:
            return int(self.words[offset >> 3])
        return int(struct.unpack_from("<Q", self.data, offset)[0])

    def beyond(self, address: int) -> bool:
        return address - self.base > len(self.data) - 8


class Unwinder:
    """Unwinds and names the samples of one process."""

    def __init__(self, mappings: Iterable[perf_data.Mapping],
                 open_dso: Callable[[perf_data.Mapping], ElfFile | None],
                 perf_map: PerfMap | None, kallsyms: Kallsyms | None,
                 demangle: Callable[[str], str] | None = None) -> None:
        executable = [m for m in mappings if m.prot & 4 or m.filename.startswith("[")]
        executable.sort(key=lambda m: m.start)
        self.maps = executable
        self.starts = [m.start for m in executable]
        self.open_dso = open_dso
        self.perf_map = perf_map
        self.kallsyms = kallsyms
        self.demangle = demangle or Demangler()
        self.dsos: dict[tuple[str, int], Dso] = {}
        self.kernel_names: dict[int, str] = {}
        self.names: dict[int, Frame] = {}
        # lookup address -> what one unwinding step needs there (see _step_at)
        self.steps: dict[int, tuple[Frame, perf_data.Mapping | None, Dso | None,
                                    elf_frames.Row | None]] = {}

    # --- addresses -> binaries -------------------------------------------------------------

    def mapping(self, address: int) -> perf_data.Mapping | None:
        index = bisect.bisect_right(self.starts, address) - 1
        if index >= 0 and address < self.maps[index].end:
            return self.maps[index]
        return None

    def dso(self, mapping: perf_data.Mapping) -> Dso:
        key = (mapping.filename, mapping.inode)
        found = self.dsos.get(key)
        if found is not None:
            return found
        name = mapping.filename
        if is_jit(name):
            dso = Dso(label="JIT", jit=True)
        else:
            elf = self.open_dso(mapping)
            label = name.rsplit("/", 1)[-1] or name
            if name.startswith("/memfd:"):
                label = name[1:]
            dso = Dso(label=clean_name(label.split(" (deleted)")[0]), elf=elf)
        self.dsos[key] = dso
        return dso

    def name_at(self, address: int, mapping: perf_data.Mapping | None) -> Frame:
        """The frame at `address` (cached: a profile hits the same few thousand addresses)."""
        cached = self.names.get(address)
        if cached is None:
            cached = self.names[address] = self._name_at(address, mapping)
        return cached

    def _name_at(self, address: int, mapping: perf_data.Mapping | None) -> Frame:
        if mapping is None:
            if self.perf_map is not None:
                jit = self.perf_map.lookup(address)
                if jit is not None:
                    return Frame(clean_name(jit), True)
            return Frame("[unknown]", False)
        dso = self.dso(mapping)
        if dso.jit or dso.elf is None:
            if self.perf_map is not None:
                jit = self.perf_map.lookup(address)
                if jit is not None:
                    return Frame(clean_name(jit), True)
            if dso.jit:
                return Frame("[JIT code without a perf map entry]", False)
            return Frame(f"[{dso.label}]", False, dso.label)
        vaddr = dso.elf.vaddr_of_offset(address - mapping.start + mapping.pgoff)
        symbol = dso.elf.symbol(vaddr) if vaddr is not None else None
        if symbol is None and vaddr is not None:
            go = go_frame(dso.elf, vaddr)
            if go is not None:
                return go
        if symbol is None:
            # A runtime may name code inside its own binary in its perf map: V8 logs its
            # embedded builtins (Builtins_JSEntry, ...), which a stripped libnode does not name.
            logged = self.perf_map.lookup(address) if self.perf_map is not None else None
            if logged is not None:
                return Frame(clean_name(logged), True)
            # A hidden function of a stripped binary: its start tells it from its neighbours
            # and resolves with the binary's debug symbols (addr2line -f -e FILE.debug START).
            start = dso.elf.function_start(vaddr) if vaddr is not None else None
            where = f"+{start:#x}" if start is not None else ""
            return Frame(f"[{dso.label}{where}]", False, dso.label)
        return Frame(clean_name(self.demangle(symbol)), True)

    def kernel_name(self, address: int) -> Frame:
        cached = self.kernel_names.get(address)
        if cached is None:
            symbol = self.kallsyms.lookup(address) if self.kallsyms else None
            cached = clean_name(symbol) + KERNEL_SUFFIX if symbol else ""
            self.kernel_names[address] = cached
        return Frame(cached, True) if cached else Frame("[kernel]", False)

    # --- unwinding -------------------------------------------------------------------------

    def unwind(self, sample: perf_data.Sample) -> list[Frame]:
        """The sample's frames, innermost (leaf) first: kernel, then user."""
        frames = [self.kernel_name(address) for address in sample.kernel]
        if sample.regs and sample.stack:
            frames += self._unwind_user(sample)
        elif sample.user_chain:
            frames += self._fp_chain(sample.user_chain)
        elif sample.ip and not sample.kernel:
            frames.append(self.name_at(sample.ip, self.mapping(sample.ip)))
        return _collapse_unnamed(_expand_inlined(frames))

    def _fp_chain(self, chain: list[int]) -> list[Frame]:
        """Frames the kernel's frame-pointer walk found (`perf record -g`)."""
        frames = []
        for index, address in enumerate(chain):
            lookup = address - 1 if index else address
            mapping = self.mapping(lookup)
            if mapping is not None:
                self.dso(mapping).methods.add(FRAME_POINTER)
            frames.append(self.name_at(lookup, mapping))
        return frames

    def _unwind_user(self, sample: perf_data.Sample) -> list[Frame]:
        regs = dict(sample.regs)
        if RSP not in regs or RA not in regs:
            return [Frame("[unwind stopped: no user registers in the sample]", False)]
        stack = Stack(regs[RSP], sample.stack, len(sample.stack) < sample.attr.stack_user)
        frames: list[Frame] = []
        pc = regs[RA]
        steps = self.steps
        for depth in range(MAX_DEPTH):
            # A return address points after the call: look up the call itself.
            lookup = pc if depth == 0 else pc - 1
            step = steps.get(lookup)
            if step is None:
                step = steps[lookup] = self._step_at(lookup)
            frame, mapping, dso, row = step
            frames.append(frame)
            if mapping is None or dso is None:
                if depth:
                    frames[-1] = Frame(
                        "[unwind stopped: a return address outside any mapping]", False)
                return frames
            if row is None and depth and dso.jit and frame.name.startswith(PYTHON_TRAMPOLINE):
                row = TRAMPOLINE_ROW
            if row is not None:
                dso.methods.add("python-trampoline" if row is TRAMPOLINE_ROW else CFI)
                outcome = self._cfi_step(row, regs, stack)
            else:
                dso.methods.add(FRAME_POINTER)
                outcome = self._fp_step(regs, stack)
            if outcome == "end":
                return frames
            if outcome == "beyond" and stack.complete:
                return frames
            if outcome == "beyond":
                frames.append(Frame("[unwind stopped: stack deeper than the "
                                    f"{len(stack.data) / 1024:g} KiB copied]", False))
                return frames
            if outcome == "no-fp":
                if dso.elf is not None and dso.elf.is_go:
                    what = "switched stacks (Go runtime: goroutine and system stacks)"
                elif dso.elf is None or not dso.elf.has_cfi:
                    what = "has no frame pointers"
                else:
                    what = "has no CFI for this code and no frame pointer"
                frames.append(Frame(f"[unwind stopped: {dso.label} {what}]", False))
                return frames
            if regs[RA] == 0:
                return frames
            pc = regs[RA]
        frames.append(Frame(f"[unwind stopped: deeper than {MAX_DEPTH} frames]", False))
        return frames

    def _step_at(self, lookup: int) -> tuple[Frame, perf_data.Mapping | None, Dso | None,
                                             elf_frames.Row | None]:
        """The frame at `lookup`, its mapping and binary, and the CFI row in force there:
        computed once per address (an off-CPU or wall profile unwinds the same few thousand
        addresses tens of thousands of times)."""
        mapping = self.mapping(lookup)
        frame = self.name_at(lookup, mapping)
        if mapping is None:
            return frame, None, None, None
        dso = self.dso(mapping)
        row = None
        if dso.elf is not None and dso.elf.has_cfi:
            vaddr = dso.elf.vaddr_of_offset(lookup - mapping.start + mapping.pgoff)
            row = dso.elf.row(vaddr) if vaddr is not None else None
        return frame, mapping, dso, row

    @staticmethod
    def _cfi_step(row: elf_frames.Row, regs: dict[int, int], stack: Stack) -> str:
        if row.cfa_expr is not None:
            cfa = elf_frames.evaluate_cfa_expression(row.cfa_expr, regs)
        elif row.cfa_reg in regs:
            cfa = (regs[row.cfa_reg] + row.cfa_offset) & 0xFFFFFFFFFFFFFFFF
        else:
            cfa = None
        if cfa is None:
            return "no-fp"
        ra_rule = row.rules.get(RA)
        if ra_rule is None or ra_rule.kind == "undefined":
            return "end"
        new: dict[int, int] = {reg: value for reg, value in regs.items() if reg in CALLEE_SAVED}
        for reg, rule in row.rules.items():
            if rule.kind == "same":
                if reg in regs:
                    new[reg] = regs[reg]
                continue
            value = _apply(rule, cfa, regs, stack)
            if value is None:
                new.pop(reg, None)
                if reg == RA:
                    return "beyond" if rule.kind == "offset" and stack.beyond(
                        cfa + rule.value) else "no-fp"
            else:
                new[reg] = value
        if cfa <= regs[RSP] and not row.signal:
            return "no-fp"  # the stack grows down: a caller's frame is above ours
        new[RSP] = cfa
        regs.clear()
        regs.update(new)
        return "ok"

    @staticmethod
    def _fp_step(regs: dict[int, int], stack: Stack) -> str:
        frame = regs.get(RBP)
        if frame is None:
            return "no-fp"
        if frame == 0:
            return "end"  # the outermost frame (Go, and runtimes that clear it at the start)
        if frame < regs[RSP] or frame % 8:
            return "no-fp"
        saved, ra = stack.read(frame), stack.read(frame + 8)
        if saved is None or ra is None:
            return "beyond" if stack.beyond(frame + 8) else "no-fp"
        regs[RBP] = saved
        regs[RA] = ra
        regs[RSP] = frame + 16
        return "ok"


def _apply(rule: Rule, cfa: int, regs: dict[int, int], stack: Stack) -> int | None:
    if rule.kind == "offset":
        return stack.read(cfa + rule.value)
    if rule.kind == "val":
        return cfa + rule.value
    if rule.kind == "reg":
        return regs.get(rule.value)
    return None


def is_jit(filename: str) -> bool:
    """Anonymous executable memory: where JIT compilers put their code."""
    return (filename in ("//anon", "[anon]", "") or filename.startswith("[anon:")
            or filename.startswith("/tmp/perf-") or filename.startswith("//anon"))


def go_frame(elf: ElfFile, vaddr: int) -> Frame | None:
    """A Go binary without .symtab (`-ldflags="-s -w"`): its function, file and line from Go's
    own table (.gopclntab), with the calls inlined there, as `name (file:line)`."""
    if elf.has_symtab or not elf.is_go:
        return None
    table = elf.go_table()
    found = table.frames(vaddr) if table is not None else None
    if not found:
        return None
    outer, inner = found[-1], found[:-1]
    return Frame(clean_name(outer.label()), True,
                 inlined=tuple(clean_name(frame.label()) for frame in inner))


def _expand_inlined(frames: list[Frame]) -> list[Frame]:
    """Frames with inlined calls become one frame per call, innermost first."""
    if not any(frame.inlined for frame in frames):
        return frames
    result: list[Frame] = []
    for frame in frames:
        result += [Frame(name, True) for name in frame.inlined]
        result.append(frame)
    return result


def _collapse_unnamed(frames: list[Frame]) -> list[Frame]:
    """Runs of unnamed frames of one binary become one frame that says what it is once: the
    function's own label when the run is one function, else the binary's (`[libfoo.so]`)."""
    result: list[Frame] = []
    for frame in frames:
        previous = result[-1] if result else None
        if previous is not None and frame.named is False and previous.named is False:
            if previous.name == frame.name:
                continue
            if frame.library and previous.library == frame.library:
                result[-1] = Frame(f"[{frame.library}]", False, frame.library)
                continue
        result.append(frame)
    return result


@dataclass
class Folded:
    """Folded stacks and what the summary says about them."""

    stacks: dict[str, int] = field(default_factory=dict)
    frames: int = 0
    named: int = 0
    samples: int = 0  # the total weight: samples, or microseconds for off-CPU and wall
    events: int = 0  # samples and context switches, however weighted
    depth_total: int = 0
    max_depth: int = 0
    stopped: int = 0  # samples whose unwinding stopped early
    # Unnamed frames by their binary (weighted as `frames`): where symbols are missing.
    unnamed: dict[str, int] = field(default_factory=dict)

    def add(self, frames: list[Frame], weight: int, events: int = 0) -> None:
        if not frames:
            return
        key = ";".join(frame.name for frame in reversed(frames))
        self.stacks[key] = self.stacks.get(key, 0) + weight
        self.samples += weight
        self.events += events or weight
        counted = sum(1 for frame in frames if frame.named is not None)
        self.frames += counted * weight
        self.named += sum(1 for frame in frames if frame.named) * weight
        for frame in frames:
            if frame.named is False and frame.library:
                self.unnamed[frame.library] = self.unnamed.get(frame.library, 0) + weight
        self.depth_total += len(frames) * weight
        self.max_depth = max(self.max_depth, len(frames))
        if frames[-1].name.startswith("[unwind stopped"):
            self.stopped += weight

    @property
    def named_share(self) -> float:
        return self.named / self.frames if self.frames else 0.0

    @property
    def mean_depth(self) -> float:
        return self.depth_total / self.samples if self.samples else 0.0

    def text(self) -> str:
        ordered = sorted(self.stacks.items(), key=lambda item: (-item[1], item[0]))
        return "".join(f"{stack} {count}\n" for stack, count in ordered)
