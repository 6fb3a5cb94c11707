"""Shared helpers of the in-sidecar scripts (flamegraph, lttng-trace, uprobe-trace, doctor).

Everything here reads /proc of the pod's shared PID namespace. It must work without any
privilege (the `lttng` profile drops every capability), so each probe degrades to "unknown"
instead of raising when the kernel refuses to show another container's details.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import NoReturn

# Exit codes shared by all scripts.
EXIT_OK = 0
EXIT_FAILED = 1  # the technique ran but failed (tool error, nothing recorded)
EXIT_USAGE = 2  # bad arguments
EXIT_NO_TARGET = 3  # no process to profile / trace
EXIT_NOT_POSSIBLE = 4  # this pod/sidecar lacks what the technique needs (doctor explains)

# Infrastructure processes of a pod: the pause container (Kubernetes) or podman's infra
# container (catatonit), and the toolset container's own tooling.
INFRA_COMMANDS = {"pause", "catatonit", "podman-pause", "conmon"}
SIDECAR_COMMANDS = {
    "toolset-entrypo",  # comm is truncated to 15 characters
    "toolset-entrypoint",
    "lttng-sessiond",
    "lttng-runas",
    "lttng-consumerd",
    "sleep",
    "perf",
    "bpftrace",
    "babeltrace2",
}

# Runtimes whose code is JIT-compiled: perf needs /tmp/perf-PID.map to name their frames.
JIT_HINTS = {
    "node": "node --perf-basic-prof (or NODE_OPTIONS=--perf-basic-prof); "
    "annotation sidecar-debug.io/runtime: node",
    "nodejs": "node --perf-basic-prof (or NODE_OPTIONS=--perf-basic-prof); "
    "annotation sidecar-debug.io/runtime: node",
    "dotnet": "DOTNET_PerfMapEnabled=1 (older: COMPlus_PerfMapEnabled=1); "
    "annotation sidecar-debug.io/runtime: dotnet",
    "java": "-XX:+PreserveFramePointer and `jcmd PID Compiler.perfmap` (JDK >= 17); "
    "annotation sidecar-debug.io/runtime: java",
    "python": "PYTHONPERFSUPPORT=1 (Python >= 3.12); annotation sidecar-debug.io/runtime: python",
}


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def fail(message: str, code: int = EXIT_FAILED) -> NoReturn:
    """Print an error that says what to do, and exit with a meaningful code."""
    log(f"error: {message}")
    raise SystemExit(code)


def read_text(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return None


@dataclass
class Process:
    pid: int
    comm: str
    cmdline: list[str]
    start_ticks: int
    cgroup: str
    uid: int
    exe: str | None = None
    environ_keys: set[str] = field(default_factory=set)

    @property
    def command_line(self) -> str:
        return " ".join(self.cmdline) if self.cmdline else f"[{self.comm}]"

    @property
    def runtime(self) -> str | None:
        """The JIT runtime this process runs, if any (by executable name)."""
        names = (
            [os.path.basename(self.exe or "")]
            + [os.path.basename(arg) for arg in self.cmdline[:1]]
            + [self.comm]
        )
        for name in names:
            base = re.sub(r"[0-9.]+$", "", name)
            if base in JIT_HINTS:
                return base
        return None


def read_process(pid: int) -> Process | None:
    stat = read_text(f"/proc/{pid}/stat")
    if stat is None:
        return None
    # comm is in parentheses and may contain spaces or parentheses itself.
    close = stat.rfind(")")
    comm = stat[stat.find("(") + 1 : close]
    fields = stat[close + 2 :].split()
    start_ticks = int(fields[19])  # field 22 of /proc/PID/stat
    raw_cmdline = read_text(f"/proc/{pid}/cmdline") or ""
    cmdline = [arg for arg in raw_cmdline.split("\0") if arg]
    status = read_text(f"/proc/{pid}/status") or ""
    uid_match = re.search(r"^Uid:\s+(\d+)", status, re.MULTILINE)
    try:
        exe: str | None = os.readlink(f"/proc/{pid}/exe")
    except OSError:
        exe = None  # another container's process without CAP_SYS_PTRACE
    return Process(
        pid=pid,
        comm=comm,
        cmdline=cmdline,
        start_ticks=start_ticks,
        cgroup=read_text(f"/proc/{pid}/cgroup") or "",
        uid=int(uid_match.group(1)) if uid_match else -1,
        exe=exe,
    )


def all_processes() -> list[Process]:
    processes = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            process = read_process(int(entry))
            if process is not None and process.cmdline:  # no cmdline: kernel thread or zombie
                processes.append(process)
    return sorted(processes, key=lambda p: (p.start_ticks, p.pid))


def own_cgroup() -> str:
    return read_text("/proc/self/cgroup") or ""


def is_ours(process: Process, mine: str) -> bool:
    """True for processes of the toolset container itself (same cgroup as this script)."""
    if process.pid == os.getpid():
        return True
    if mine and process.cgroup == mine:
        return True
    try:
        return os.readlink(f"/proc/{process.pid}/ns/mnt") == os.readlink("/proc/self/ns/mnt")
    except OSError:
        return False


def app_processes() -> list[Process]:
    """Processes of the other containers of the pod, oldest first."""
    mine = own_cgroup()
    result = []
    for process in all_processes():
        if process.comm in INFRA_COMMANDS or process.pid == 1 and process.comm in ("pause",):
            continue
        if is_ours(process, mine):
            continue
        result.append(process)
    return result


def pid_namespace_shared() -> bool:
    """With shareProcessNamespace the sidecar sees the pod's infra process as PID 1."""
    first = read_process(1)
    if first is None:
        return False
    return first.comm in INFRA_COMMANDS or bool(app_processes())


def find_target(pid: int | None, name: str | None) -> Process:
    """The process to profile: --pid, else the oldest app process matching --name, else the
    oldest process of another container (the app's main process)."""
    if pid is not None:
        process = read_process(pid)
        if process is None:
            fail(f"no process {pid} in this PID namespace (see `ps -ef`)", EXIT_NO_TARGET)
        return process
    candidates = app_processes()
    if name is not None:
        pattern = re.compile(name)
        candidates = [
            p for p in candidates if pattern.search(p.command_line) or pattern.search(p.comm)
        ]
        if not candidates:
            fail(
                f"no process of another container matches --name {name!r} (see `ps -ef`)",
                EXIT_NO_TARGET,
            )
    if not candidates:
        hint = (
            "the pod does not share its PID namespace (spec.shareProcessNamespace: true)"
            if not pid_namespace_shared()
            else "no other container's process is running yet"
        )
        fail(f"no app process found: {hint}; pass --pid PID", EXIT_NO_TARGET)
    return candidates[0]


def describe(process: Process) -> str:
    return f"PID {process.pid} ({process.comm}): {process.command_line[:160]}"


def perf_map_paths(pid: int) -> list[str]:
    """Where the JIT runtime's perf map can be read: the shared /tmp, or through the target's
    root (an ephemeral container shares no volume with the app)."""
    return [f"/tmp/perf-{pid}.map", f"/proc/{pid}/root/tmp/perf-{pid}.map"]  # noqa: S108


def find_perf_map(pid: int) -> str | None:
    for path in perf_map_paths(pid):
        try:
            if os.path.getsize(path) > 0:
                return path
        except OSError:
            continue
    return None


def ns_pid(pid: int) -> int:
    """The PID as the innermost namespace of the process sees it (NSpid's last field)."""
    status = read_text(f"/proc/{pid}/status") or ""
    match = re.search(r"^NSpid:\s+(.+)$", status, re.MULTILINE)
    return int(match.group(1).split()[-1]) if match else pid


def require_tool(name: str, package: str) -> str:
    path = shutil.which(name)
    if path is None:
        variant = os.environ.get("SIDECAR_DEBUG_TOOLSET_VARIANT", "?")
        fail(
            f"`{name}` is not installed in this toolset image (variant {variant}); it comes with "
            f"the Debian package {package} (the `full` toolset image has it)",
            EXIT_NOT_POSSIBLE,
        )
    return path


def run(command: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    """subprocess.run with text I/O; the caller checks the return code. stdin is /dev/null:
    perf reads its data from stdin when stdin is a pipe (as under an exec without a TTY)."""
    if "input" not in kwargs:
        kwargs.setdefault("stdin", subprocess.DEVNULL)
    return subprocess.run(command, text=True, check=False, **kwargs)  # type: ignore  # noqa: S603


def wait_with_progress(
    seconds: float, label: str, process: subprocess.Popen[str] | None = None
) -> None:
    """Sleep for `seconds`, printing a progress line every few seconds (stderr)."""
    deadline = time.monotonic() + seconds
    step = 1.0 if seconds <= 10 else 5.0
    started = time.monotonic()
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        if process is not None and process.poll() is not None:
            break
        time.sleep(min(step, remaining))
        elapsed = time.monotonic() - started
        log(f"{label}: {min(elapsed, seconds):.0f}/{seconds:.0f} s")


def capabilities() -> set[str]:
    """Names of the effective capabilities of this process."""
    names = {
        0: "CHOWN",
        1: "DAC_OVERRIDE",
        2: "DAC_READ_SEARCH",
        3: "FOWNER",
        4: "FSETID",
        5: "KILL",
        6: "SETGID",
        7: "SETUID",
        8: "SETPCAP",
        9: "LINUX_IMMUTABLE",
        10: "NET_BIND_SERVICE",
        11: "NET_BROADCAST",
        12: "NET_ADMIN",
        13: "NET_RAW",
        14: "IPC_LOCK",
        15: "IPC_OWNER",
        16: "SYS_MODULE",
        17: "SYS_RAWIO",
        18: "SYS_CHROOT",
        19: "SYS_PTRACE",
        20: "SYS_PACCT",
        21: "SYS_ADMIN",
        22: "SYS_BOOT",
        23: "SYS_NICE",
        24: "SYS_RESOURCE",
        25: "SYS_TIME",
        26: "SYS_TTY_CONFIG",
        27: "MKNOD",
        28: "LEASE",
        29: "AUDIT_WRITE",
        30: "AUDIT_CONTROL",
        31: "SETFCAP",
        32: "MAC_OVERRIDE",
        33: "MAC_ADMIN",
        34: "SYSLOG",
        35: "WAKE_ALARM",
        36: "BLOCK_SUSPEND",
        37: "AUDIT_READ",
        38: "PERFMON",
        39: "BPF",
        40: "CHECKPOINT_RESTORE",
    }
    status = read_text("/proc/self/status") or ""
    match = re.search(r"^CapEff:\s+([0-9a-f]+)", status, re.MULTILINE)
    mask = int(match.group(1), 16) if match else 0
    return {name for bit, name in names.items() if mask & (1 << bit)}


def ensure_tracefs() -> str | None:
    """Mount tracefs when it is missing (it is not mounted in containers); needs privilege."""
    for path in ("/sys/kernel/tracing", "/sys/kernel/debug/tracing"):
        if os.path.exists(os.path.join(path, "uprobe_events")) or os.path.exists(
            os.path.join(path, "available_events")
        ):
            return path
    target = "/sys/kernel/tracing"
    if os.path.isdir(target):
        result = run(["mount", "-t", "tracefs", "nodev", target], capture_output=True)
        if result.returncode == 0:
            return target
    return None
