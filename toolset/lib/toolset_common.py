"""Shared helpers of the in-sidecar scripts (flamegraph, lttng-trace, uprobe-trace, doctor).

Everything here reads /proc of the pod's shared PID namespace. It must work without any
privilege (the `lttng` profile drops every capability), so each probe degrades to "unknown"
instead of raising when the kernel refuses to show another container's details.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
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
# Every process of a toolset container inherits the image's environment: another toolset
# beside this one (the injected sidecar, seen from an attached ephemeral container) is never
# the app. Where its environment is not ours to read, its entrypoint's command line says it
# (a python3 script: its comm is python3).
TOOLSET_ENV_MARK = b"SIDECAR_DEBUG_TOOLSET_VARIANT="
TOOLSET_SCRIPTS = {"toolset-entrypoint", "results-agent"}
# A service mesh's proxy is the oldest process of many pods (Istio starts it first with
# holdApplicationUntilProxyStarts): the default target is the oldest process that is not one.
PROXY_COMMANDS = {"envoy", "pilot-agent", "linkerd2-proxy", "linkerd-await"}
# An entrypoint that starts the app as its child instead of exec'ing it (an init such as tini,
# a shell script without `exec`): the default target is the app under it, not the wrapper.
WRAPPER_COMMANDS = {"tini", "tini-static", "dumb-init", "sh", "dash", "bash", "ash"}
ENVIRON_LIMIT = 256 << 10
PROC_TEXT_LIMIT = 1 << 20  # a hostile app's command line can be megabytes

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


def read_text(path: str, limit: int = PROC_TEXT_LIMIT) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read(limit)
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
    ppid: int = 0

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


def stat_fields(stat: str) -> list[str]:
    """The fields of a /proc/PID/stat text after the command name (field 3, the state, is
    [0]): the name is in parentheses and may itself hold spaces and parentheses."""
    return stat[stat.rfind(")") + 2 :].split()


def read_process(pid: int) -> Process | None:
    stat = read_text(f"/proc/{pid}/stat")
    if stat is None:
        return None
    comm = stat[stat.find("(") + 1 : stat.rfind(")")]
    fields = stat_fields(stat)
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
        ppid=int(fields[1]),  # field 4 of /proc/PID/stat
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


def is_toolset(process: Process) -> bool:
    """True for a process of a toolset container (ours or another: the image's environment
    variable, else a toolset script's command line). An app that imitates either only takes
    its own container out of the default choice; --pid still reaches it."""
    script = any(os.path.basename(arg) in TOOLSET_SCRIPTS for arg in process.cmdline[:2])
    try:
        with open(f"/proc/{process.pid}/environ", "rb") as handle:
            environ = handle.read(ENVIRON_LIMIT)
    except OSError:  # another uid or more capabilities than ours: not ours to read
        return script
    return script or environ.startswith(TOOLSET_ENV_MARK) or \
        b"\0" + TOOLSET_ENV_MARK in environ


def app_processes() -> list[Process]:
    """Processes of the other containers of the pod, oldest first, without those of toolset
    containers (a container is one cgroup: all of a toolset's processes go with it)."""
    mine = own_cgroup()
    others = []
    for process in all_processes():
        if process.comm in INFRA_COMMANDS or process.pid == 1 and process.comm in ("pause",):
            continue
        if is_ours(process, mine):
            continue
        others.append(process)
    toolsets = [process for process in others if is_toolset(process)]
    toolset_cgroups = {process.cgroup for process in toolsets if process.cgroup}
    toolset_pids = {process.pid for process in toolsets}
    return [process for process in others
            if process.pid not in toolset_pids and process.cgroup not in toolset_cgroups]


def pid_namespace_shared() -> bool:
    """With shareProcessNamespace the sidecar sees the pod's infra process as PID 1."""
    first = read_process(1)
    if first is None:
        return False
    return first.comm in INFRA_COMMANDS or bool(app_processes())


def find_target(pid: int | None, name: str | None) -> Process:
    """The process to profile: --pid, else the oldest app process matching --name, else the
    oldest process of another container (the app's main process) that is not a mesh proxy
    (PROXY_COMMANDS; when only proxies run, the oldest of them)."""
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
    chosen = min(candidates, key=lambda p: p.comm in PROXY_COMMANDS)  # stable: oldest first
    return chosen if name is not None else under_wrappers(chosen, candidates)


def under_wrappers(process: Process, candidates: list[Process]) -> Process:
    """The app an entrypoint wrapper started: while `process` is a wrapper (WRAPPER_COMMANDS)
    with a child among `candidates`, its oldest child."""
    seen = {process.pid}
    while process.comm in WRAPPER_COMMANDS:
        children = [p for p in candidates if p.ppid == process.pid and p.pid not in seen]
        if not children:
            break
        process = children[0]  # candidates are oldest first
        seen.add(process.pid)
    return process


def descendants(pid: int, processes: list[Process]) -> list[Process]:
    """The processes below `pid` (children, their children, ...), oldest first."""
    below: set[int] = {pid}
    found: list[Process] = []
    grew = True
    while grew:
        grew = False
        for process in processes:
            if process.ppid in below and process.pid not in below:
                below.add(process.pid)
                found.append(process)
                grew = True
    return sorted(found, key=lambda p: (p.start_ticks, p.pid))


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of `pid` so far (/proc/PID/stat: readable for any process)."""
    stat = read_text(f"/proc/{pid}/stat", 4096)
    if stat is None:
        return None
    fields = stat_fields(stat)
    try:
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (IndexError, ValueError):
        return None


def describe(process: Process) -> str:
    """One line for the user's terminal: the app chooses its command line and name, escape
    sequences and newlines included, so those are shown escaped."""
    return f"PID {process.pid} ({_display(process.comm)}): {_display(process.command_line[:160])}"


PERF_MAP_LIMIT = 256 << 20  # a JIT map of a big app is tens of MB; the app chooses its size


def perf_map_owners(pid: int) -> set[int]:
    """Who may own the app's perf map: the app's user, or root."""
    process = read_process(pid)
    return {0} | ({process.uid} if process is not None and process.uid >= 0 else set())


def local_perf_map(pid: int) -> str:
    return f"/tmp/perf-{pid}.map"  # noqa: S108 - where perf looks for it


def open_perf_map(pid: int) -> tuple[int, str] | None:
    """The app's JIT perf map, opened for reading without following any link out: the shared
    /tmp, or through the target's root (an ephemeral container shares no volume with the
    app), resolved inside that root. (fd, where it was found), or None."""
    owners = perf_map_owners(pid)
    try:
        return open_file(local_perf_map(pid), owners=owners), local_perf_map(pid)
    except (OSError, UnsafePath):
        pass
    inside = f"/tmp/perf-{ns_pid(pid)}.map"  # noqa: S108 - in the app's own filesystem
    try:
        fd, resolved = open_in_root(f"/proc/{pid}/root", inside, owners=owners)
    except (OSError, UnsafePath):
        return None
    return fd, f"/proc/{pid}/root{resolved}"


def find_perf_map(pid: int) -> str | None:
    """Where the app's non-empty perf map is (see open_perf_map), or None."""
    opened = open_perf_map(pid)
    if opened is None:
        return None
    fd, where = opened
    try:
        return where if os.fstat(fd).st_size > 0 else None
    finally:
        os.close(fd)


def unsafe_perf_map(pid: int) -> str | None:
    """Why /tmp/perf-PID.map must not be read by a tool that follows links (perf does), or
    None when it is absent or a plain file of the app's user or root."""
    path = local_perf_map(pid)
    try:
        os.close(open_file(path, owners=perf_map_owners(pid)))
    except FileNotFoundError:
        return None
    except UnsafePath as error:
        return str(error) if path in str(error) else f"{path}: {error}"
    except OSError as error:
        if error.errno == errno.ELOOP:
            return f"{path} is a symbolic link"
        return None
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


# --- files in volumes the app can write ------------------------------------------------------
# The shared /tmp and /var/run/lttng are emptyDirs (mode 0777, no sticky bit) that the app's
# containers write too, possibly as root. Any name there may be a symlink to the sidecar's own
# files, a FIFO, or a directory swapped between two system calls; and this sidecar runs as root.
# So the scripts never hand such a path to open() or to a tool: tools write into a private
# directory on the sidecar's own filesystem (private_workdir), and results are published into
# the shared volume through directory file descriptors, one component at a time, with
# O_NOFOLLOW|O_EXCL. Reads of the app's files check with fstat that they got a regular file.

PRIVATE_DIR_ENV = "SIDECAR_DEBUG_PRIVATE_DIR"
PRIVATE_DIR_DEFAULT = "/var/lib/sidecar-debug"
MAX_SYMLINKS = 40  # as the kernel's path walk
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class UnsafePath(Exception):
    """A path the app can write is not what it must be (a symlink, a FIFO, ...): refused."""


def file_kind(mode: int) -> str:
    kinds = [
        (stat.S_ISLNK, "symbolic link"),
        (stat.S_ISDIR, "directory"),
        (stat.S_ISREG, "regular file"),
        (stat.S_ISFIFO, "FIFO"),
        (stat.S_ISSOCK, "socket"),
        (stat.S_ISCHR, "character device"),
        (stat.S_ISBLK, "block device"),
    ]
    return next((name for test, name in kinds if test(mode)), "special file")


def mount_id(fd: int) -> int | None:
    """The id of the mount an open file is on (/proc/self/fdinfo), or None if unknown."""
    match = re.search(r"^mnt_id:\s+(\d+)", read_text(f"/proc/self/fdinfo/{fd}") or "", re.M)
    return int(match.group(1)) if match else None


def root_mount_id() -> int | None:
    fd = os.open("/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        return mount_id(fd)
    finally:
        os.close(fd)


def _trusted_symlink(dir_fd: int) -> bool:
    """Symlinks on the sidecar's own root filesystem (its image, e.g. Debian's /var/run -> /run)
    are followed: the app cannot write there. Anywhere else, a volume, a link may be the app's."""
    root = root_mount_id()
    return root is not None and mount_id(dir_fd) == root


def printable(text: str) -> str:
    """Text of the app's (its log messages, its JIT symbol names) for the user's terminal: each
    control character (an escape sequence, a carriage return) shown escaped, the rest as is."""
    return "".join(c if c.isprintable() or c == "\t" else ascii(c)[1:-1] for c in text)


def _display(path: str) -> str:
    """A path for messages: the app chooses its names, control characters included."""
    return ascii(path)[1:-1] if path.isprintable() else ascii(path)


def open_dir(path: str, *, create: bool = False, mode: int = 0o700) -> int:
    """Open directory `path` (an O_DIRECTORY fd), creating missing components with `mode` when
    `create`. No symlink is followed except on the sidecar's own root filesystem, so a link
    the app planted in a shared volume raises UnsafePath instead of redirecting root."""
    pending = [part for part in os.path.abspath(path).split("/") if part]
    walked: list[str] = []
    fd = os.open("/", _DIR_FLAGS)
    links = 0
    try:
        while pending:
            name = pending.pop(0)
            if name == "..":  # only from a trusted link's target: restart from the top
                pending = walked[:-1] + pending
                walked = []
                os.close(fd)
                fd = os.open("/", _DIR_FLAGS)
                continue
            try:
                next_fd = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise
                try:
                    os.mkdir(name, mode, dir_fd=fd)
                except FileExistsError:
                    pass  # created meanwhile (by us or the app): checked by the open below
                next_fd = -1
            except OSError as error:
                if error.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
                next_fd = -1
            if next_fd < 0:
                try:
                    next_fd = os.open(name, _DIR_FLAGS, dir_fd=fd)
                except OSError as error:
                    if error.errno not in (errno.ELOOP, errno.ENOTDIR):
                        raise
                    info = os.stat(name, dir_fd=fd, follow_symlinks=False)
                    where = "/" + "/".join([*walked, name])
                    if not stat.S_ISLNK(info.st_mode):
                        raise UnsafePath(
                            f"{_display(where)} is a {file_kind(info.st_mode)}, not a directory"
                        ) from None
                    if not _trusted_symlink(fd):
                        raise UnsafePath(
                            f"{_display(where)} is a symbolic link in a volume the app can "
                            "write: not followed (remove it, or choose another --out)"
                        ) from None
                    links += 1
                    if links > MAX_SYMLINKS:
                        raise UnsafePath(f"too many symbolic links in {_display(path)}") from None
                    target = os.readlink(name, dir_fd=fd)
                    parts = [part for part in target.split("/") if part and part != "."]
                    if target.startswith("/"):
                        pending = parts + pending
                        walked = []
                        os.close(fd)
                        fd = os.open("/", _DIR_FLAGS)
                    else:
                        pending = parts + pending
                    continue
            os.close(fd)
            fd = next_fd
            walked.append(name)
        return fd
    except BaseException:
        os.close(fd)
        raise


def create_file(dir_fd: int, name: str, mode: int = 0o600, *, replace: bool = True) -> int:
    """Create `name` in an open directory for writing; never through a link, never into an
    existing file. With `replace`, an existing non-directory entry is removed first."""
    if "/" in name or name in ("", ".", ".."):
        raise ValueError(f"not a plain file name: {name!r}")
    if replace:
        try:
            info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            pass
        else:
            if stat.S_ISDIR(info.st_mode):
                raise UnsafePath(f"{_display(name)} is a directory, not a file to replace")
            os.unlink(name, dir_fd=dir_fd)
    try:
        return os.open(name, _CREATE_FLAGS, mode, dir_fd=dir_fd)
    except FileExistsError:
        raise UnsafePath(
            f"{_display(name)} already exists (or appeared while writing): not overwritten"
        ) from None


def write_file(path: str, data: bytes, mode: int = 0o600, *, replace: bool = True) -> None:
    """Write a new file at `path` (its directory is created) without following any link."""
    directory, name = os.path.split(os.path.abspath(path))
    dir_fd = open_dir(directory, create=True)
    try:
        with os.fdopen(create_file(dir_fd, name, mode, replace=replace), "wb") as handle:
            handle.write(data)
    finally:
        os.close(dir_fd)


def remove_entry(dir_fd: int, name: str) -> None:
    """Remove `name` from an open directory, whatever it is; a directory's tree is removed
    through file descriptors (shutil.rmtree with dir_fd follows no link)."""
    try:
        info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(info.st_mode):
        shutil.rmtree(name, dir_fd=dir_fd)
    else:
        os.unlink(name, dir_fd=dir_fd)


def publish(
    source: str, dir_fd: int, name: str, *, file_mode: int = 0o600, dir_mode: int = 0o700
) -> None:
    """Copy `source` (a file or tree in a private directory) to `name` in an open directory of
    a shared volume, replacing what is there; links and special files in `source` are skipped
    (they are the tools' own output, but nothing needs them)."""
    info = os.stat(source, follow_symlinks=False)
    if stat.S_ISDIR(info.st_mode):
        remove_entry(dir_fd, name)
        try:
            os.mkdir(name, dir_mode, dir_fd=dir_fd)
        except FileExistsError:
            raise UnsafePath(
                f"{_display(name)} appeared while publishing: not overwritten"
            ) from None
        sub_fd = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
        try:
            with os.scandir(source) as entries:
                for entry in entries:
                    publish(entry.path, sub_fd, entry.name, file_mode=file_mode, dir_mode=dir_mode)
        finally:
            os.close(sub_fd)
    elif stat.S_ISREG(info.st_mode):
        target = create_file(dir_fd, name, file_mode)
        with open(source, "rb") as src, os.fdopen(target, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)


def open_output_dir(path: str) -> int:
    """The results folder (created), opened before any work: an unusable one fails fast, and
    the descriptor keeps naming this folder even if the app renames or replaces it later."""
    try:
        return open_dir(path, create=True, mode=0o700)
    except (OSError, UnsafePath) as error:
        fail(
            f"cannot use the output folder {_display(path)}: {error}. Pass --out with a folder "
            "the app has not prepared (e.g. a new name under /tmp)",
            EXIT_NOT_POSSIBLE,
        )


def publish_results(work: str, out_fd: int, names: list[str]) -> None:
    """Publish WORK/NAME for each name into the opened results folder (see publish)."""
    try:
        for name in names:
            publish(os.path.join(work, name), out_fd, name)
    except (OSError, UnsafePath) as error:
        fail(f"cannot write the results: {error}")


def private_base() -> str:
    """The sidecar's private directory (0700, created): on its own root filesystem, which no
    other container of the pod can see, or SIDECAR_DEBUG_PRIVATE_DIR when set. Raises OSError
    or UnsafePath when it cannot be had (a read-only root filesystem, a volume there)."""
    base = os.environ.get(PRIVATE_DIR_ENV) or PRIVATE_DIR_DEFAULT
    fd = open_dir(base, create=True, mode=0o700)
    try:
        if PRIVATE_DIR_ENV not in os.environ and mount_id(fd) != root_mount_id():
            raise UnsafePath(
                f"{base} is a mounted volume, which other containers may share; set "
                f"{PRIVATE_DIR_ENV} to a directory only the sidecar mounts"
            )
    finally:
        os.close(fd)
    return base


def private_workdir(prefix: str) -> str:
    """A new directory under private_base(): the tools (perf, lttng's consumer daemon,
    babeltrace2) write there by path, out of the app's reach."""
    try:
        base = private_base()
    except (OSError, UnsafePath) as error:
        fail(
            f"no private directory for the results ({error}): the toolset needs a writable "
            f"root filesystem, or {PRIVATE_DIR_ENV} naming a directory only the sidecar mounts",
            EXIT_NOT_POSSIBLE,
        )
    return tempfile.mkdtemp(prefix=prefix, dir=base)


def open_regular(name: str, dir_fd: int | None = None, *, owners: set[int] | None = None) -> int:
    """Open a file the app may control for reading: not through a final symlink, not a FIFO or
    device (O_NONBLOCK: a FIFO cannot block us), and owned by one of `owners` when given."""
    fd = os.open(name, _READ_FLAGS, dir_fd=dir_fd)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise UnsafePath(f"{_display(name)} is a {file_kind(info.st_mode)}, not a regular file")
        if owners is not None and info.st_uid not in owners:
            raise UnsafePath(
                f"{_display(name)} belongs to uid {info.st_uid}, expected one of {sorted(owners)}"
            )
        return fd
    except BaseException:
        os.close(fd)
        raise


def open_file(path: str, *, owners: set[int] | None = None) -> int:
    """open_regular for a full path: its directories are walked as open_dir does."""
    directory, name = os.path.split(os.path.abspath(path))
    dir_fd = open_dir(directory)
    try:
        return open_regular(name, dir_fd, owners=owners)
    finally:
        os.close(dir_fd)


def resolve_in_root(root: str, path: str) -> tuple[int, str, str]:
    """Walk `path` as a process whose root directory is `root` (e.g. /proc/PID/root) would:
    an absolute symlink restarts at `root`, `..` stops at it. The kernel would resolve such a
    link against the sidecar's root instead, handing the app any of the sidecar's files.
    Returns (fd of the last directory, last name, the resolved path inside the root); the last
    name is not a symlink (at the time of the walk)."""
    root_fd = os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    stack: list[tuple[int, str]] = []  # (fd, name) of the directories below the root
    pending = [part for part in path.split("/") if part and part != "."]
    links = 0
    try:
        while True:
            current = stack[-1][0] if stack else root_fd
            if not pending:
                raise UnsafePath(f"{_display(path)} names a directory, not a file")
            name = pending.pop(0)
            if name == "..":
                if stack:
                    os.close(stack.pop()[0])
                continue
            info = os.stat(name, dir_fd=current, follow_symlinks=False)
            if stat.S_ISLNK(info.st_mode):
                links += 1
                if links > MAX_SYMLINKS:
                    raise UnsafePath(f"too many symbolic links in {_display(path)}")
                target = os.readlink(name, dir_fd=current)
                if target.startswith("/"):
                    while stack:
                        os.close(stack.pop()[0])
                pending = [part for part in target.split("/") if part and part != "."] + pending
                continue
            if not pending:
                fd = os.dup(current)
                resolved = "/" + "/".join([*(n for _, n in stack), name])
                return fd, name, resolved
            if not stat.S_ISDIR(info.st_mode):
                raise UnsafePath(f"{_display(name)} in {_display(path)} is not a directory")
            stack.append(
                (
                    os.open(
                        name,
                        os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                        dir_fd=current,
                    ),
                    name,
                )
            )
    finally:
        for fd, _ in stack:
            os.close(fd)
        os.close(root_fd)


def open_in_root(root: str, path: str, *, owners: set[int] | None = None) -> tuple[int, str]:
    """Open a regular file of another container through its root (see resolve_in_root):
    (fd, path resolved inside the root)."""
    dir_fd, name, resolved = resolve_in_root(root, path)
    try:
        return open_regular(name, dir_fd, owners=owners), resolved
    finally:
        os.close(dir_fd)


def read_fd(fd: int, limit: int) -> bytes:
    """Read at most `limit` bytes and close the fd."""
    with os.fdopen(fd, "rb") as handle:
        return handle.read(limit)


def remove_links(path: str) -> list[str]:
    """Remove every symlink, FIFO and device below directory `path` (walked through file
    descriptors, nothing followed): what a root daemon starting there (lttng-sessiond) would
    otherwise follow. Returns what was removed, for the log."""
    removed: list[str] = []

    def clean(dir_fd: int, where: str) -> None:
        with os.scandir(dir_fd) as entries:
            listed = list(entries)
        for entry in listed:
            info = entry.stat(follow_symlinks=False)
            if stat.S_ISDIR(info.st_mode):
                try:
                    sub = os.open(entry.name, _DIR_FLAGS, dir_fd=dir_fd)
                except OSError:
                    continue
                try:
                    clean(sub, f"{where}/{entry.name}")
                finally:
                    os.close(sub)
            elif not (stat.S_ISREG(info.st_mode) or stat.S_ISSOCK(info.st_mode)):
                os.unlink(entry.name, dir_fd=dir_fd)
                removed.append(f"{where}/{entry.name} ({file_kind(info.st_mode)})")

    fd = open_dir(path)
    try:
        clean(fd, path.rstrip("/"))
    finally:
        os.close(fd)
    return removed
