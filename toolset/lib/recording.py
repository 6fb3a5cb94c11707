# ruff: noqa: S603  (runs the tools of this image with arguments built here)
"""The one recording entry point of the toolset: profile a process of the pod into a run
directory holding `stacks.folded` (the source of truth) and `meta.json` (what was recorded, how,
and how well: the named share, the unwinding used per binary, warnings).

`flamegraph` (exec'd from a workstation) and the results agent both call `record_run`. Nothing
here renders: the workstation (or the results page) draws the graph from these two files.

Techniques, chosen per target:
- perf (`perf record --call-graph dwarf`, or `-g` when every binary keeps frame pointers),
  unwound and named by stacks_unwind.py: C/C++/Go/Rust, Node and Java JIT code through their
  perf maps, Python >= 3.12 through its perf trampolines;
- py-spy for Python < 3.12 (no perf support there): Python and native frames merged.
Types: cpu (on-CPU samples), offcpu (time blocked, from context switches), wall (both, in time).

Failures raise RecordingFailed with an exit code, a stable machine-readable reason and ONE line
that says why and what to do; meta.json of a failed run carries the same.
"""

from __future__ import annotations

import json
import os
import re
import resource
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import debuginfo
import elf_frames
import perf_data
import perf_limits
import stacks_unwind
import toolset_common as common

TYPES = ("cpu", "offcpu", "wall")
# Stack bytes copied per sample for DWARF unwinding. 32 KiB holds the stacks of the sample
# runtimes from the leaf to main (Node's deepest in the demo: ~14 KiB); deeper ones end in one
# `[unwind stopped: stack deeper than ...]` frame. The copy is most of the sampling cost.
DWARF_STACK = 32768
OFFCPU_STACK = 16384
PERF_DATA_LIMIT = 1 << 30
DSO_LIMIT = 1 << 32

# Reasons (meta.json `error.reason`, stable for machines) -> exit code.
REASONS = {
    "no-target": common.EXIT_NO_TARGET,
    "no-tool": common.EXIT_NOT_POSSIBLE,
    "ptrace": common.EXIT_NOT_POSSIBLE,  # the app's uid differs and no CAP_SYS_PTRACE
    "paranoid": common.EXIT_NOT_POSSIBLE,  # perf_event_paranoid forbids it, no CAP_PERFMON
    "seccomp": common.EXIT_NOT_POSSIBLE,  # the container's seccomp filter refuses perf
    "memlock": common.EXIT_NOT_POSSIBLE,  # no room for even perf's default ring buffer
    "denied": common.EXIT_NOT_POSSIBLE,  # a security module refuses perf_event_open
    "type-unsupported": common.EXIT_NOT_POSSIBLE,  # this --type cannot run here
    "no-samples": common.EXIT_FAILED,
    "tool-failed": common.EXIT_FAILED,
}


class RecordingFailed(Exception):
    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.code = REASONS.get(reason, common.EXIT_FAILED)

    def as_meta(self) -> dict[str, Any]:
        return {"error": {"reason": self.reason, "code": self.code, "message": self.message}}


@dataclass
class Options:
    target: common.Process
    type: str = "cpu"
    seconds: float = 10.0
    frequency: int = 99
    technique: str = "auto"  # auto | perf | py-spy
    progress: Callable[[str], None] = common.log


class Phases:
    """Wall and CPU seconds of each phase of a recording (meta.json `timings` and
    `cpu_seconds`). CPU counts this process and the children it waited for (perf): on a busy
    node wall time waits for a CPU, CPU seconds do not."""

    def __init__(self) -> None:
        self.wall: dict[str, float] = {}
        self.cpu: dict[str, float] = {}
        self._mark()

    @staticmethod
    def _cpu_now() -> float:
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        return time.process_time() + children.ru_utime + children.ru_stime

    def _mark(self) -> None:
        self._wall, self._cpu = time.monotonic(), self._cpu_now()

    def done(self, name: str) -> None:
        """The phase since the last one ended (or since the start) is `name`."""
        wall, cpu = time.monotonic(), self._cpu_now()
        self.wall[name] = round(self.wall.get(name, 0.0) + wall - self._wall, 3)
        self.cpu[name] = round(self.cpu.get(name, 0.0) + cpu - self._cpu, 3)
        self._wall, self._cpu = wall, cpu


@dataclass
class Run:
    folded: stacks_unwind.Folded
    meta: dict[str, Any]
    warnings: list[str] = field(default_factory=list)


# --- permissions: one line that says why, before perf says it in ten -------------------------

@dataclass
class Access:
    user_only: bool
    facts: perf_limits.Facts
    note: str = ""  # for the run's warnings
    why: str = ""  # the reason alone, for a refusal that depends on it


def perf_access(target: common.Process) -> Access:
    """What perf may do with the target here, or RecordingFailed saying why not."""
    facts = perf_limits.gather()
    if target.uid >= 0 and target.uid != facts.euid and "SYS_PTRACE" not in facts.caps:
        raise RecordingFailed("ptrace", perf_limits.ptrace_line(facts, target.pid, target.uid)
                              + ", or run the toolset as the app's uid")
    paranoid = facts.paranoid
    if perf_limits.perfmon(facts) or paranoid <= 1:
        return Access(user_only=False, facts=facts)
    if paranoid >= 3:
        raise RecordingFailed(
            "paranoid",
            f"perf_event_paranoid is {paranoid} on this node and this toolset has no "
            f"CAP_PERFMON: no perf events at all; {perf_limits.advice(facts, 'PERFMON')}, or "
            "lower kernel.perf_event_paranoid to 2 on the node")
    why = f"perf_event_paranoid is {paranoid} and this toolset has no CAP_PERFMON"
    return Access(user_only=True, facts=facts, why=why, note=(
        f"user-space only: {why}, so kernel frames are not sampled (time in system calls "
        "shows as the user frame that called them)"))


def explain_perf_error(stderr: str, target: common.Process,
                       facts: perf_limits.Facts | None = None) -> RecordingFailed:
    reason, message = perf_limits.diagnose(facts or perf_limits.gather(), stderr, target.pid,
                                           target.uid)
    return RecordingFailed(reason, message)


# --- reading the app's binaries ---------------------------------------------------------------

class BinaryOpener:
    """Opens the binaries the app has mapped, as its mount namespace has them: the exact mapped
    file through /proc/PID/map_files where this toolset may (CAP_SYS_ADMIN), else the path
    walked inside /proc/PID/root without leaving it (common.open_in_root), the inode checked
    against the mapping's. Only the parts of the file the unwinder reads are read."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.cache: dict[tuple[str, int], elf_frames.ElfFile | None] = {}
        self.vdso: elf_frames.ElfFile | None | bool = False
        self.problems: list[str] = []
        # Debug files by build-id for binaries without .symtab: the image's, then debuginfod.
        self.debuginfo = debuginfo.DebugInfo()

    def __call__(self, mapping: perf_data.Mapping) -> elf_frames.ElfFile | None:
        if mapping.filename == "[vdso]":
            return self._vdso()
        if not mapping.filename.startswith("/") or mapping.filename.startswith("//"):
            return None
        key = (mapping.filename, mapping.inode)
        if key not in self.cache:
            self.cache[key] = self._open(mapping)
        return self.cache[key]

    def _open(self, mapping: perf_data.Mapping,
              wanted: tuple[str, ...] = elf_frames.WANTED) -> elf_frames.ElfFile | None:
        fd = -1
        try:
            fd = os.open(f"/proc/{self.pid}/map_files/{mapping.start:x}-{mapping.end:x}",
                         os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            path = mapping.filename.removesuffix(" (deleted)")
            try:
                fd, _ = common.open_in_root(f"/proc/{self.pid}/root", path)
            except (OSError, common.UnsafePath) as error:
                self.problems.append(f"{common.printable(path)}: {error}")
                return None
        try:
            info = os.fstat(fd)
            if mapping.inode and info.st_ino != mapping.inode:
                self.problems.append(f"{common.printable(mapping.filename)} was replaced "
                                     "since the app mapped it: its frames are unnamed")
                return None
            elf = elf_frames.load(fd, info.st_size, mapping.filename, DSO_LIMIT, wanted)
            if wanted and not elf.has_symtab:
                elf.debug_symbols = self.debuginfo.find(elf.build_id(), mapping.filename)
            return elf
        except (OSError, elf_frames.ElfError) as error:
            self.problems.append(f"{common.printable(mapping.filename)}: {error}")
            return None
        finally:
            os.close(fd)

    def _vdso(self) -> elf_frames.ElfFile | None:
        """The kernel's vDSO is the same in every process: ours is read from our memory."""
        if self.vdso is False:
            self.vdso = None
            for line in (common.read_text("/proc/self/maps") or "").splitlines():
                if line.endswith("[vdso]"):
                    start, end = (int(part, 16) for part in line.split()[0].split("-"))
                    import ctypes

                    try:
                        self.vdso = elf_frames.ElfFile(ctypes.string_at(start, end - start),
                                                       "[vdso]")
                    except elf_frames.ElfError:
                        self.vdso = None
        return self.vdso if isinstance(self.vdso, elf_frames.ElfFile) else None

    def headers(self, mapping: perf_data.Mapping) -> elf_frames.ElfFile | None:
        """The file's headers and section names only (is it Go?): cheap, not cached."""
        return self._open(mapping, wanted=())


def read_perf_map(pid: int) -> stacks_unwind.PerfMap | None:
    opened = common.open_perf_map(pid)
    if opened is None:
        return None
    try:
        return stacks_unwind.PerfMap(common.read_fd(opened[0], common.PERF_MAP_LIMIT))
    except OSError:
        return None


def kallsyms() -> stacks_unwind.Kallsyms | None:
    try:
        with open("/proc/kallsyms", "rb") as handle:
            text = handle.read()
    except OSError:
        return None
    table = stacks_unwind.Kallsyms(text)
    return table if table.starts else None


def frame_pointers_everywhere(pid: int, opener: BinaryOpener) -> bool:
    """True when every executable file the process maps is a Go binary (Go keeps frame
    pointers on amd64, and a Go binary is usually all the code there is): the kernel's
    frame-pointer walk (`-g`) is then complete and cheaper than copying stacks."""
    maps = common.read_text(f"/proc/{pid}/maps") or ""
    files = set()
    for line in maps.splitlines():
        parts = line.split(None, 5)
        if len(parts) == 6 and "x" in parts[1] and parts[5].startswith("/"):
            start, end = (int(part, 16) for part in parts[0].split("-"))
            files.add((parts[5], start, end, int(parts[4])))
    if not files:
        return False
    for name, start, end, inode in files:
        elf = opener.headers(perf_data.Mapping(pid, start, end, 0, name, inode))
        if elf is None or not elf.is_go:
            return False
    return True


# --- runtimes ---------------------------------------------------------------------------------

def python_version(target: common.Process) -> tuple[int, int] | None:
    """The Python version a process runs (from its executable's or libpython's name)."""
    names = [target.exe or "", *(target.cmdline[:1]), target.comm]
    maps = common.read_text(f"/proc/{target.pid}/maps") or ""
    names += re.findall(r"libpython(\d+\.\d+)", maps)
    for name in names:
        match = re.search(r"python(\d+)\.(\d+)", os.path.basename(name)) or re.fullmatch(
            r"(\d+)\.(\d+)", name)
        if match:
            return int(match.group(1)), int(match.group(2))
    if re.search(r"python", " ".join(names[:3])):
        return None
    return None


def detect_runtime(target: common.Process) -> str:
    runtime = target.runtime
    if runtime == "python":
        version = python_version(target)
        return f"python{version[0]}.{version[1]}" if version else "python"
    if runtime:
        return runtime
    maps = common.read_text(f"/proc/{target.pid}/maps") or ""
    if re.search(r"libpython\d", maps):
        return "python"
    if "libjvm.so" in maps:
        return "java"
    if "libcoreclr.so" in maps:
        return "dotnet"
    return "native"


def choose_technique(options: Options, runtime: str) -> str:
    if options.technique != "auto":
        return options.technique
    if runtime.startswith("python"):
        version = python_version(options.target)
        has_map = common.find_perf_map(options.target.pid) is not None
        if (version is None or version < (3, 12) or not has_map) and shutil.which("py-spy"):
            return "py-spy"
    return "perf"


# --- perf -------------------------------------------------------------------------------------

def record_once(command: list[str], options: Options, *, merged: bool) -> tuple[int, str]:
    """Run a recorder for the recording's seconds, showing progress: (exit code, what it said).
    `merged`: its stdout and stderr are one stream (py-spy); else its stderr alone (perf, whose
    stdout is not read)."""
    options.progress(f"recording {options.seconds:g} s at {options.frequency} Hz "
                     f"({options.type}): {' '.join(command)}")
    recorder = subprocess.Popen(command, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE if merged else subprocess.DEVNULL,
                                stderr=subprocess.STDOUT if merged else subprocess.PIPE,
                                text=True)
    common.wait_with_progress(options.seconds, "recording", recorder)
    output, errors = recorder.communicate()
    return recorder.returncode, output if merged else errors


def perf_command(perf: str, options: Options, access: Access, data: str,
                 frame_pointers: bool, buffer_kib: int | None = None) -> list[str]:
    modifier = "u" if access.user_only else ""  # event-term syntax: cpu-clock/freq=99/u
    stack = OFFCPU_STACK if options.type == "offcpu" else DWARF_STACK
    callgraph = ["-g"] if frame_pointers else ["--call-graph", f"dwarf,{stack}"]
    events: list[str] = []
    if options.type in ("cpu", "wall"):
        events += ["-e", f"cpu-clock/freq={options.frequency}/{modifier}"]
    if options.type in ("offcpu", "wall"):
        # Every switch-out of the app's threads, with its stack; --switch-events adds the
        # switch-in times (how long each wait lasted). Software events: no tracefs needed.
        # A switch copies OFFCPU_STACK bytes, also beside wall's bigger cpu-clock copies: a
        # busy app switches thousands of times in a few seconds, and each copy is the app's
        # cost while recording and perf.data's size to read after it.
        terms = "" if frame_pointers else f",call-graph=dwarf,stack-size={OFFCPU_STACK}"
        events += ["-e", f"context-switches/period=1{terms}/", "--switch-events"]
    # A bigger ring buffer than perf's default (512 KiB per CPU) keeps dwarf samples from being
    # lost where the locked-memory limit allows it (perf_limits.buffer_plan); None: the default.
    buffer = [] if buffer_kib is None else ["-m", f"{buffer_kib}K"]
    # --no-buildid(-cache): perf opens no binary (the toolset reads them safely, later);
    # --no-bpf-event: no BPF program events to synthesize (0.6 s of perf's start here).
    return [perf, "record", *events, *callgraph, "--no-buildid", "--no-buildid-cache",
            "--no-bpf-event", *buffer, "-p", str(options.target.pid), "-o", data, "--",
            "sleep", f"{options.seconds:g}"]


def java_perf_map(target: common.Process) -> str | None:
    """Have the JVM write /tmp/perf-PID.map (its JIT code's names) with jattach, as `jcmd PID
    Compiler.perfmap` would (JDK >= 17); jattach finds the JVM's attach socket through its
    mount namespace and user. None when done, else a warning."""
    jattach = shutil.which("jattach")
    if jattach is None:
        return "jattach is not in this toolset image: Java's JIT frames are unnamed"
    try:
        result = subprocess.run([jattach, str(target.pid), "jcmd", "Compiler.perfmap"],
                                capture_output=True, text=True, timeout=30, check=False,
                                stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return "jattach did not get an answer from the JVM in 30 s: Java's JIT frames are unnamed"
    if result.returncode != 0:
        last = [line for line in (result.stdout + result.stderr).splitlines() if line.strip()]
        return (f"jattach {target.pid} jcmd Compiler.perfmap failed "
                f"({common.printable((last or ['?'])[-1])[:200]}): Java's JIT frames are unnamed")
    return None


def run_perf(options: Options, work: str) -> Run:
    perf = shutil.which("perf")
    if perf is None:
        raise RecordingFailed("no-tool", "perf is not installed in this toolset image: use the "
                                         "toolset or toolset-slim image")
    target = options.target
    phases = Phases()
    access = perf_access(target)
    if access.user_only and options.type != "cpu":
        raise RecordingFailed(
            "type-unsupported",
            f"--type {options.type} needs context-switch events, which happen in the kernel: "
            f"{access.why}; use --type cpu, or: " + perf_limits.advice(access.facts, "PERFMON"))
    opener = BinaryOpener(target.pid)
    frame_pointers = options.type == "cpu" and frame_pointers_everywhere(target.pid, opener)
    warnings = [access.note] if access.note else []
    java = detect_runtime(target) == "java"
    jattach_worked = False
    if java:
        # Before recording (the code compiled so far), and again after (what it compiled
        # meanwhile): the JVM rewrites the whole map each time.
        problem = java_perf_map(target)
        jattach_worked = problem is None
        if problem:
            warnings.append(problem)
    data = os.path.join(work, "perf.data")
    plan = perf_limits.buffer_plan(access.facts)
    refused: list[int] = []
    phases.done("prepare")
    for buffer_kib in plan.sizes:
        command = perf_command(perf, options, access, data, frame_pointers, buffer_kib)
        returncode, stderr = record_once(command, options, merged=False)
        if returncode == 0 and os.path.exists(data):
            break
        if buffer_kib is not None and perf_limits.mapping_refused(stderr):
            # Another perf of this uid on the node may hold part of the budget: halve.
            refused.append(buffer_kib)
            options.progress(f"the kernel refused a {perf_limits.size_text(buffer_kib)} ring "
                             "buffer per CPU (locked-memory limit): trying half")
            continue
        raise explain_perf_error(stderr, target, access.facts)
    phases.done("perf")
    if jattach_worked:
        java_perf_map(target)
    perf_map = read_perf_map(target.pid)
    unsafe = common.unsafe_perf_map(target.pid)
    if unsafe:
        # Read without following links (open_perf_map): a planted link is simply not read.
        warnings.append(f"ignored the app's perf map: {unsafe} (planted by the app?)")
    phases.done("perf_map")
    folded, unwinder, lost = unwind_file(data, target.pid, opener, perf_map, options, phases)
    # binary -> how its frames were unwound ("dwarf-cfi", "frame-pointer", or both joined by +)
    methods = {dso.label: "+".join(sorted(dso.methods))
               for dso in unwinder.dsos.values() if dso.methods}
    warnings += opener.problems[:5] + opener.debuginfo.problems[:5]
    used_kib = buffer_kib or perf_limits.default_kib(access.facts)
    buffer_line = perf_limits.buffer_line(access.facts, used_kib, lost)
    if lost:
        warnings.append(f"{buffer_line}: counts are lower than the truth")
    runtime_hint = "java" if java else target.runtime
    if runtime_hint in common.JIT_HINTS and runtime_hint != "python" and perf_map is None:
        warnings.append(f"{runtime_hint} JIT-compiles its code but no perf map was found: JIT "
                        f"frames are unnamed. Start the app with "
                        f"{common.JIT_HINTS[runtime_hint]}")
    meta: dict[str, Any] = {
        "technique": "perf",
        "unwinding": methods,
        # binary -> where its debug symbols came from (debug-dir, debuginfod, ... (cached))
        "debug_symbols": dict(sorted(opener.debuginfo.found.items())),
        "callgraph": "frame-pointer" if frame_pointers else callgraph_text(options.type),
        "user_only": access.user_only,
        # Per CPU, KiB: the size perf ran with, what the locked-memory limit refused or
        # ruled out first, and the limit; lost: samples the kernel could not write.
        "ring_buffer": {"kib": used_kib, "wanted_kib": perf_limits.WANTED_KIB,
                        "refused_kib": refused, "over_limit_kib": plan.skipped,
                        "limit": perf_limits.limit_text(access.facts), "summary": buffer_line},
        "lost_samples": lost,
        "perf_map_entries": len(perf_map) if perf_map else 0,
        "unwind_seconds": round(sum(seconds for name, seconds in phases.wall.items()
                                    if name not in ("prepare", "perf")), 3),
        # Where the time went, wall and CPU seconds: before perf started (prepare), perf (the
        # recording, its start and exit), the JIT map (perf_map), reading perf.data (read),
        # the kernel's symbols (kernel_symbols), unwinding, naming and folding (unwind).
        "timings": phases.wall,
        "cpu_seconds": phases.cpu,
        "tools": {"perf": tool_version([perf, "version"])},
    }
    return Run(folded, meta, warnings)


def callgraph_text(kind: str) -> str:
    """meta.json `callgraph` of a dwarf recording: the stack bytes copied per event."""
    copies = {"cpu": f"{DWARF_STACK} B per sample", "offcpu": f"{OFFCPU_STACK} B per switch",
              "wall": f"{DWARF_STACK} B per sample, {OFFCPU_STACK} B per switch"}[kind]
    return f"dwarf ({copies} stack copies, frame pointers where no CFI)"


def unwind_file(path: str, pid: int, opener: BinaryOpener,
                perf_map: stacks_unwind.PerfMap | None,
                options: Options, phases: Phases | None = None,
                ) -> tuple[stacks_unwind.Folded, stacks_unwind.Unwinder, int]:
    """The folded stacks, the unwinder (how each binary was unwound), and the samples lost:
    LOST_SAMPLES counts samples only, LOST every record the full ring buffer dropped (the
    two overlap: the larger is the loss)."""
    try:
        parsed = perf_data.read(path, PERF_DATA_LIMIT)
    except (OSError, perf_data.PerfDataError) as error:
        raise RecordingFailed("tool-failed", f"cannot read perf's data: {error}") from error
    records = list(parsed.records())
    mappings = [r for r in records if isinstance(r, perf_data.Mapping)]
    samples = [r for r in records if isinstance(r, perf_data.Sample)]
    losses = [r for r in records if isinstance(r, perf_data.Lost)]
    lost = max(sum(r.count for r in losses if r.samples_only),
               sum(r.count for r in losses if not r.samples_only))
    phases = phases or Phases()
    phases.done("read")
    kernel = kallsyms() if any(s.kernel for s in samples) else None
    phases.done("kernel_symbols")
    unwinder = stacks_unwind.Unwinder(mappings, opener, perf_map, kernel)
    folded = stacks_unwind.Folded()
    cpu_samples = [s for s in samples if s.attr.type == 1 and s.attr.config == 0]  # cpu-clock
    switches = [s for s in samples if s.attr.type == 1 and s.attr.config == 3]
    period_us = max(1, round(1_000_000 / options.frequency))
    for sample in cpu_samples:
        frames = unwinder.unwind(sample)
        if options.type == "wall":
            frames.append(stacks_unwind.Frame("[on CPU]", None))  # the root: one tower each
        folded.add(frames, period_us if options.type == "wall" else 1, 1)
    if switches:
        waits = off_cpu_waits(records)
        for sample in switches:
            wait = waits.get((sample.tid, sample.time))
            if wait is None or wait[0] <= 0:
                continue
            frames = unwinder.unwind(sample)
            state = "[off CPU: preempted, waiting for a CPU]" if wait[1] else "[off CPU: blocked]"
            frames.append(stacks_unwind.Frame(state, None))
            folded.add(frames, max(1, wait[0] // 1000), 1)
    phases.done("unwind")
    return folded, unwinder, lost


def off_cpu_waits(records: list[perf_data.Record]) -> dict[tuple[int, int], tuple[int, bool]]:
    """(tid, switch-out sample time) -> (nanoseconds until the thread ran again, preempted).
    The sample comes just before the SWITCH-out record of the same thread."""
    waits: dict[tuple[int, int], tuple[int, bool]] = {}
    pending: dict[int, tuple[int, bool]] = {}
    last_sample: dict[int, int] = {}
    for record in records:
        if isinstance(record, perf_data.Sample) and record.attr.config == 3:
            last_sample[record.tid] = record.time
        elif isinstance(record, perf_data.Switch):
            if record.out:
                if record.tid in last_sample:
                    pending[record.tid] = (last_sample.pop(record.tid), record.preempt)
            elif record.tid in pending:
                sampled, preempt = pending.pop(record.tid)
                waits[(record.tid, sampled)] = (record.time - sampled, preempt)
    return waits


# --- py-spy -----------------------------------------------------------------------------------

PYSPY_FRAME = re.compile(r"^(?P<name>.*?) \((?P<file>[^()]*)\)$")


def pyspy_command(pyspy: str, options: Options, out: str, native: bool) -> list[str]:
    # Blocking (py-spy pauses the app per sample) either way: --nonblocking reads torn stacks.
    command = [pyspy, "record", "--pid", str(options.target.pid), "--duration",
               str(max(1, round(options.seconds))), "--rate", str(options.frequency),
               "--format", "raw", "--output", out, *(["--native"] if native else [])]
    if options.type == "wall":
        command.append("--idle")
    return command


def last_line(output: str) -> str:
    lines = [line for line in output.strip().splitlines() if line.strip()]
    return common.printable(lines[-1] if lines else "?")[:200]


def native_refused(output: str) -> bool:
    """py-spy's native unwinding failed (not the app, not our permissions): libunwind's
    UNW_EINVAL on Debian bookworm's python3.11, say."""
    return ("ermission" not in output and "No such process" not in output
            and re.search(r"UNW_|unwind|native", output, re.IGNORECASE) is not None)


def probe_native(pyspy: str, pid: int) -> str | None:
    """One `py-spy dump --native` (0.2 s): None when native stacks work on this process, else
    py-spy's reason, so a recording does not fail after its whole duration."""
    try:
        result = subprocess.run([pyspy, "dump", "--pid", str(pid), "--native"],
                                capture_output=True, text=True, timeout=30, check=False,
                                stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return "py-spy dump --native did not finish in 30 s"
    output = result.stdout + result.stderr
    if result.returncode != 0 and native_refused(output):
        return last_line(output)
    return None


def run_pyspy(options: Options, work: str) -> Run:
    pyspy = shutil.which("py-spy")
    if pyspy is None:
        raise RecordingFailed("no-tool", "py-spy is not in this toolset image (Python < 3.12 "
                                         "needs it): use the full toolset image")
    target = options.target
    facts = perf_limits.gather()
    if target.uid != facts.euid and "SYS_PTRACE" not in facts.caps:
        raise RecordingFailed(
            "ptrace",
            f"the app (PID {target.pid}) runs as uid {target.uid} and this toolset as uid "
            f"{facts.euid} without CAP_SYS_PTRACE, which py-spy needs to read its memory: "
            + perf_limits.advice(facts, "SYS_PTRACE"))
    if options.type == "offcpu":
        raise RecordingFailed(
            "type-unsupported",
            "off-CPU stacks of Python < 3.12 are not available (py-spy samples stacks, it "
            "does not see waits): use --type wall (py-spy --idle: where time goes, waiting "
            "included) or Python >= 3.12 with PYTHONPERFSUPPORT=1")
    out = os.path.join(work, "py-spy.folded")
    why_not_native = probe_native(pyspy, target.pid)
    native = why_not_native is None
    while True:
        command = pyspy_command(pyspy, options, out, native)
        returncode, output = record_once(command, options, merged=True)
        if returncode == 0 and os.path.exists(out):
            break
        if native and native_refused(output):
            native, why_not_native = False, last_line(output)
            options.progress(f"py-spy --native failed ({why_not_native}): recording again "
                             "without native frames")
            continue
        if "ermission" in output:
            raise RecordingFailed("ptrace", "py-spy may not read the app's memory "
                                            f"({last_line(output)}): "
                                  + perf_limits.advice(facts, "SYS_PTRACE"))
        raise RecordingFailed("tool-failed", f"py-spy failed: {last_line(output)}")
    folded = stacks_unwind.Folded()
    namer = PyspyNamer(target.pid)
    with open(out, encoding="utf-8", errors="replace") as handle:
        for line in handle:
            stack, _, count = line.rstrip("\n").rpartition(" ")
            if not stack or not count.isdigit():
                continue
            frames = [namer(name) for name in stack.split(";")]
            frames.reverse()  # leaf first, as the unwinder's
            folded.add(frames, int(count))
    warnings = [] if native else [
        f"Python frames only: py-spy --native failed on this process ({why_not_native}), so "
        "native (C) frames are not shown"]
    meta: dict[str, Any] = {
        "technique": "py-spy",
        "native": native,
        "unwinding": {"python": "py-spy (the interpreter's frame objects)",
                      "native": "py-spy --native (dwarf-cfi)" if native
                      else f"none: --native failed ({why_not_native})"},
        "callgraph": "py-spy --native" if native else "py-spy (Python frames only)",
        "tools": {"py-spy": tool_version([pyspy, "--version"])},
    }
    return Run(folded, meta, warnings)


PYSPY_ADDRESS = re.compile(r"^0x([0-9a-f]{1,16}) \(([^()]*)\)$")


class PyspyNamer:
    """py-spy's frames; the native ones it could not name (`0x7f... (libc.so.6)`: a static
    function, no .dynsym entry) named by this toolset's symbolizer, which also reads the
    image's debug symbols by build-id (libc6-dbg)."""

    def __init__(self, pid: int) -> None:
        self.opener = BinaryOpener(pid)
        maps = []
        for line in (common.read_text(f"/proc/{pid}/maps") or "").splitlines():
            parts = line.split(None, 5)
            if len(parts) == 6 and "x" in parts[1] and parts[5].startswith("/"):
                start, end = (int(part, 16) for part in parts[0].split("-"))
                maps.append(perf_data.Mapping(pid, start, end, int(parts[2], 16), parts[5],
                                              int(parts[4]), prot=5))
        self.unwinder = stacks_unwind.Unwinder(maps, self.opener, None, None)

    def __call__(self, text: str) -> stacks_unwind.Frame:
        match = PYSPY_ADDRESS.match(text)
        if match:
            address = int(match.group(1), 16)
            # A return address points after its call (as in the unwinder).
            frame = self.unwinder.name_at(address - 1, self.unwinder.mapping(address - 1))
            if frame.named:
                return frame
        return pyspy_frame(text)


def pyspy_frame(text: str) -> stacks_unwind.Frame:
    """py-spy's `function (file.py:line)`: named unless py-spy says it does not know."""
    name = stacks_unwind.clean_name(text)
    unnamed = text.startswith("0x") or "unknown" in text.split(" (")[0].lower()
    return stacks_unwind.Frame(name, not unnamed)


# --- the entry point --------------------------------------------------------------------------

def tool_version(command: list[str]) -> str:
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=10,
                                check=False, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return "?"
    return (result.stdout.strip().splitlines() or ["?"])[0][:80]


def tree_cpu(target: common.Process) -> dict[int, tuple[str, float]]:
    """CPU seconds so far of the target and the processes below it: {pid: (comm, seconds)}."""
    tree = [target, *common.descendants(target.pid, common.all_processes())]
    return {p.pid: (p.comm, cpu) for p in tree if (cpu := common.cpu_seconds(p.pid)) is not None}


def work_elsewhere(target: int, before: dict[int, tuple[str, float]]) -> str | None:
    """One line when the target's child processes used most of the CPU since `before` (a
    master that forks its workers, as nginx, gunicorn or PostgreSQL do): how much, which, and
    the --pid to record; None when the target did its own work."""
    used: dict[int, tuple[str, float]] = {}
    for pid, (comm, start) in before.items():
        now = common.cpu_seconds(pid)
        if now is not None:
            used[pid] = (comm, max(0.0, now - start))
    own = used.get(target, ("", 0.0))[1]
    children = sorted(((cpu, pid, comm) for pid, (comm, cpu) in used.items()
                       if pid != target and cpu > 0), reverse=True)
    theirs = sum(cpu for cpu, _, _ in children)
    if theirs < 0.05 or theirs <= 4 * own:
        return None
    listed = ", ".join(f"PID {pid} ({common.printable(comm)}) {cpu:.2f} s"
                       for cpu, pid, comm in children[:3])
    more = f", {len(children) - 3} more" if len(children) > 3 else ""
    return (f"PID {target} used {own:.2f} s of CPU while recording, its child processes "
            f"{theirs:.2f} s ({listed}{more}): the work is in them; pass --pid "
            f"{children[0][1]}")


MISSING_SYMBOLS_BELOW = 0.9  # named share under which the summary says whose symbols are missing


def missing_symbols(folded: stacks_unwind.Folded, debuginfod: bool) -> str | None:
    """One line when many frames went unnamed: the binaries they are in (the most first,
    their share of the frames) and what would name them."""
    if not folded.frames or folded.named_share >= MISSING_SYMBOLS_BELOW:
        return None
    worst = sorted(folded.unnamed.items(), key=lambda item: (-item[1], item[0]))[:3]
    if not worst:
        return None
    listed = ", ".join(f"{common.printable(binary)} {100 * weight / folded.frames:.0f} %"
                       for binary, weight in worst)
    how = ("neither this image's debug files nor the debuginfod servers (DEBUGINFOD_URLS) "
           "had their symbols" if debuginfod else
           "no symbol table here names them; with the chart's toolset.debuginfod.urls (Debian: "
           "https://debuginfod.debian.net) the toolset fetches their debug files by build-id")
    return (f"{100 * (1 - folded.named_share):.0f} % of the frames are unnamed, in {listed} "
            f"of the frames: {how}")


def record_run(options: Options, work: str) -> Run:
    """Record, unwind and fold; write WORK/stacks.folded and WORK/meta.json. Raises
    RecordingFailed (after writing meta.json with the error) when it cannot."""
    started = time.time()
    meta: dict[str, Any] = {"type": options.type, "seconds": options.seconds,
                            "frequency": options.frequency, "pid": options.target.pid,
                            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started))}
    try:
        if options.type not in TYPES:
            raise RecordingFailed("type-unsupported",
                                  f"--type {options.type}: choose one of {', '.join(TYPES)}")
        runtime = detect_runtime(options.target)
        meta["runtime"] = runtime
        technique = choose_technique(options, runtime)
        before = tree_cpu(options.target)
        run = run_pyspy(options, work) if technique == "py-spy" else run_perf(options, work)
        elsewhere = work_elsewhere(options.target.pid, before)
        if not run.folded.samples:
            raise RecordingFailed(
                "no-samples",
                f"no samples of PID {options.target.pid} in {options.seconds:g} s"
                + (f": {elsewhere}" if elsewhere else
                   ": was it on CPU? (--type wall or offcpu shows waiting)"
                   if options.type == "cpu" else ""))
        if elsewhere and options.type == "cpu":
            run.warnings.append(elsewhere)
        unnamed = missing_symbols(run.folded, bool(debuginfo.config(os.environ).urls))
        if unnamed:
            run.warnings.append(unnamed)
    except RecordingFailed as failure:
        meta.update(failure.as_meta())
        write_json(os.path.join(work, "meta.json"), meta)
        raise
    folded = run.folded
    meta.update(run.meta)
    meta.update({
        "samples": folded.samples if options.type == "cpu" else folded.events,
        "unit": "samples" if options.type == "cpu" else "microseconds",
        "weight": folded.samples,
        "named_share": round(folded.named_share, 4),
        "frames": folded.frames,
        "mean_depth": round(folded.mean_depth, 1),
        "max_depth": folded.max_depth,
        "stopped_share": round(folded.stopped / folded.samples, 4) if folded.samples else 0,
        "warnings": run.warnings,
        "duration": round(time.time() - started, 3),
    })
    with open(os.path.join(work, "stacks.folded"), "w", encoding="utf-8") as handle:
        handle.write(folded.text())
    write_json(os.path.join(work, "meta.json"), meta)
    return Run(folded, meta, run.warnings)


def write_json(path: str, value: dict[str, Any]) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(value, handle, indent=2, sort_keys=True)
        handle.write("\n")
