"""What the kernel lets perf do in this container, and the one line that says why not.

Two separate gates decide whether `perf record` runs here; neither is the profile's name:
- opening events (perf_event_open): perf_event_paranoid, CAP_PERFMON (or CAP_SYS_ADMIN), for
  another uid's process CAP_SYS_PTRACE, and the container's seccomp filter;
- mapping perf's ring buffer, which is locked memory. The kernel (kernel/events/core.c,
  perf_mmap) lets each uid lock perf_event_mlock_kb per online CPU for perf buffers, node-wide
  (every process of that uid on the node, in any container, draws from the same budget), and
  charges what goes beyond to the mapping process's RLIMIT_MEMLOCK. Only CAP_IPC_LOCK (or
  perf_event_paranoid -1) lifts both; CAP_PERFMON does not. perf maps one buffer per CPU, so
  with 2 CPUs, perf_event_mlock_kb 516 and RLIMIT_MEMLOCK 8 MiB, `-m 4M` fits and `-m 8M` is
  refused ("Permission error mapping pages").

So the ring buffer is sized to what the kernel allows: the sizes from the wanted one down to
perf's default that the limits above admit, each tried in turn (halving on the mapping error:
another perf of the same uid on the node may hold part of the budget), perf's default last.
Lost samples are counted from the recording (perf_data.Lost) and reported.

Everything that decides is a field of Facts, and the functions from Facts to a size or a line
are pure (tests/unit/toolset/test_perf_limits.py).
"""

from __future__ import annotations

import os
import platform
import re
import resource
from dataclasses import dataclass

import toolset_common as common

PAGE_KIB = 4
WANTED_KIB = 8192  # per CPU: DWARF samples (32 KiB stack copies) of a busy app, no loss at 99 Hz
# The built-in profiles whose toolset holds perf's capabilities (webhook/data/profiles.yaml).
PERF_PROFILES = ("perf", "bcc", "full")
MAPPING_REFUSED = re.compile(r"error mapping pages|mmap_pages|failed to mmap", re.IGNORECASE)
PERMISSION = re.compile(r"ermission|not permitted|Access", re.IGNORECASE)


@dataclass(frozen=True)
class Facts:
    caps: frozenset[str]
    euid: int
    paranoid: int
    mlock_kb: int  # kernel.perf_event_mlock_kb: per CPU, per uid, node-wide
    cpus: int  # online CPUs: perf maps one buffer per CPU
    memlock_kib: int | None  # RLIMIT_MEMLOCK of this process (soft); None: unlimited
    seccomp: bool  # a seccomp filter is on (runtime default filters refuse perf_event_open)
    kernel: str = ""
    profile: str = ""  # SIDECAR_DEBUG_PROFILE
    attached: bool = False  # an ephemeral (attached) toolset


def raise_memlock() -> None:
    """The soft RLIMIT_MEMLOCK up to the hard one (no privilege needed): perf inherits it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    if soft != resource.RLIM_INFINITY and (hard == resource.RLIM_INFINITY or soft < hard):
        try:
            resource.setrlimit(resource.RLIMIT_MEMLOCK, (hard, hard))
        except (OSError, ValueError):
            pass


def _int(text: str | None, default: int) -> int:
    value = (text or "").strip()
    return int(value) if re.fullmatch(r"-?[0-9]{1,9}", value) else default


def gather() -> Facts:
    raise_memlock()
    soft, _ = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    status = common.read_text("/proc/self/status") or ""
    return Facts(
        caps=frozenset(common.capabilities()),
        euid=os.geteuid(),
        paranoid=_int(common.read_text("/proc/sys/kernel/perf_event_paranoid"), 2),
        mlock_kb=_int(common.read_text("/proc/sys/kernel/perf_event_mlock_kb"), 516),
        cpus=os.sysconf("SC_NPROCESSORS_ONLN") if hasattr(os, "sysconf") else 1,
        memlock_kib=None if soft == resource.RLIM_INFINITY else soft // 1024,
        seccomp=re.search(r"^Seccomp:\s+2", status, re.MULTILINE) is not None,
        kernel=platform.release(),
        profile=os.environ.get("SIDECAR_DEBUG_PROFILE", ""),
        attached=os.environ.get("SIDECAR_DEBUG_ATTACHED") == "true",
    )


# --- the ring buffer ----------------------------------------------------------------------------

def default_kib(facts: Facts) -> int:
    """perf's own default buffer per CPU (tools/perf/util/evlist.c, perf_event_mlock_kb_in_pages):
    perf_event_mlock_kb less a page, rounded down to a power of two pages."""
    pages = max(1, (facts.mlock_kb - PAGE_KIB) // PAGE_KIB)
    return (1 << (pages.bit_length() - 1)) * PAGE_KIB


def unlimited(facts: Facts) -> bool:
    return "IPC_LOCK" in facts.caps or facts.paranoid < 0 or facts.memlock_kib is None


def fits(facts: Facts, kib: int) -> bool:
    """Whether `-m KIB` passes perf_mmap's check with nothing else of this uid locked: one
    buffer (+ its header page) per CPU, beyond the uid's perf budget charged to RLIMIT_MEMLOCK."""
    if unlimited(facts):
        return True
    pages = facts.cpus * (kib // PAGE_KIB + 1)
    budget = facts.cpus * (facts.mlock_kb // PAGE_KIB)
    return pages - budget <= (facts.memlock_kib or 0) // PAGE_KIB


@dataclass
class BufferPlan:
    sizes: list[int | None]  # per CPU, KiB, in the order to try; None: perf's default (no -m)
    skipped: list[int]  # sizes over the limit before any try


def buffer_plan(facts: Facts, wanted: int = WANTED_KIB) -> BufferPlan:
    floor = default_kib(facts)
    sizes: list[int] = []
    kib = wanted
    while kib > floor:
        sizes.append(kib)
        kib //= 2
    fitting: list[int | None] = [k for k in sizes if fits(facts, k)]
    return BufferPlan(sizes=[*fitting, None], skipped=[k for k in sizes if not fits(facts, k)])


def mapping_refused(stderr: str) -> bool:
    return MAPPING_REFUSED.search(stderr) is not None


def size_text(kib: int) -> str:
    return f"{kib // 1024} MiB" if kib >= 1024 and kib % 1024 == 0 else f"{kib} KiB"


def limit_text(facts: Facts) -> str:
    """The locked-memory limit perf's buffer is under, in one clause."""
    if "IPC_LOCK" in facts.caps:
        return "no limit (CAP_IPC_LOCK)"
    if facts.paranoid < 0:
        return "no limit (perf_event_paranoid -1)"
    memlock = "unlimited" if facts.memlock_kib is None else size_text(facts.memlock_kib)
    return (f"perf_event_mlock_kb {facts.mlock_kb} KiB x {facts.cpus} CPUs shared by every "
            f"process of uid {facts.euid} on the node, then RLIMIT_MEMLOCK {memlock}; "
            "no CAP_IPC_LOCK")


def buffer_line(facts: Facts, used: int, lost: int, wanted: int = WANTED_KIB) -> str:
    """The run's one line about its ring buffer and the samples it lost."""
    if used >= wanted:
        return f"perf ring buffer {size_text(used)} per CPU; {lost} samples lost"
    return (f"perf ring buffer {size_text(used)} per CPU, not {size_text(wanted)}: the kernel's "
            f"locked-memory limit ({limit_text(facts)}); {lost} samples lost")


def memlock_line(facts: Facts) -> str:
    return (f"the kernel refused perf's ring buffer even at perf's default "
            f"{size_text(default_kib(facts))} per CPU: the locked-memory limit "
            f"({limit_text(facts)}) is taken by other perf sessions of uid {facts.euid} on this "
            "node; end them, or raise kernel.perf_event_mlock_kb on the node")


# --- the one line -------------------------------------------------------------------------------

def kernel_before(release: str, version: tuple[int, int]) -> bool:
    match = re.match(r"(\d+)\.(\d+)", release)
    return match is not None and (int(match.group(1)), int(match.group(2))) < version


def advice(facts: Facts, missing: str) -> str:
    """What to do about a missing capability (`PERFMON`, `SYS_PTRACE`...) or `seccomp`, never
    contradicted by the pod's own profile: a pod already on a perf profile is not told to use
    it; it is told why its profile's grant did not take."""
    what = "an unconfined seccomp profile" if missing == "seccomp" else f"CAP_{missing}"
    runtime_default = not ({"PERFMON", "SYS_PTRACE", "SYS_ADMIN"} & facts.caps)
    if facts.attached and runtime_default:
        return ("this is an attached (ephemeral) toolset with the runtime's default privileges: "
                "Kubernetes < 1.23 gives ephemeral containers no securityContext; inject the "
                "toolset with the `perf` or `full` profile instead")
    taken = ("a policy or the container runtime took it away (see the toolset's "
             "securityContext: kubectl get pod -o yaml)")
    if facts.profile == "full":
        return f"the `full` profile is privileged, yet this container lacks {what}: {taken}"
    if facts.profile in PERF_PROFILES:
        if missing == "PERFMON" and kernel_before(facts.kernel, (5, 8)):
            return (f"the `{facts.profile}` profile grants CAP_PERFMON, which kernel "
                    f"{facts.kernel} predates (5.8): use the `full` profile on this node")
        return f"the `{facts.profile}` profile grants {what}, yet this container lacks it: {taken}"
    current = f"the `{facts.profile}` profile" if facts.profile else "this toolset's profile"
    return (f"{current} does not grant {what}: use the `perf` or `full` profile "
            "(annotation sidecar-debug.io/profile)")


def ptrace_line(facts: Facts, pid: int, app_uid: int) -> str:
    """The app runs as another uid and this toolset has no CAP_SYS_PTRACE. With CAP_PERFMON the
    kernel (>= 5.13) lets perf sample it all the same, but /proc/PID/maps and /proc/PID/root,
    which name every frame, stay closed: a graph of nothing but addresses."""
    what = (f"the app (PID {pid}) runs as uid {app_uid} and this toolset as uid {facts.euid} "
            "without CAP_SYS_PTRACE")
    if perfmon(facts):
        what += (", so it may not read the app's memory maps and binaries (/proc/PID/maps, "
                 "/proc/PID/root) that name its frames")
    else:
        what += ", so the kernel lets perf open no events on it"
    return f"{what}: {advice(facts, 'SYS_PTRACE')}"


def perfmon(facts: Facts) -> bool:
    return bool({"PERFMON", "SYS_ADMIN"} & facts.caps)


def diagnose(facts: Facts, stderr: str, pid: int, app_uid: int) -> tuple[str, str]:
    """perf's failure -> (reason, one line naming the real cause and what to do)."""
    text = stderr.strip()
    if "No such process" in text or "not found" in text and "process" in text:
        return "no-target", f"PID {pid} exited before perf attached"
    if mapping_refused(text):
        return "memlock", memlock_line(facts)
    if PERMISSION.search(text):
        if facts.seccomp:
            return "seccomp", ("perf_event_open is refused by this container's seccomp filter "
                               "(runtime default filters block it): " + advice(facts, "seccomp"))
        if app_uid >= 0 and app_uid != facts.euid and "SYS_PTRACE" not in facts.caps:
            return "ptrace", ptrace_line(facts, pid, app_uid)
        if not perfmon(facts) and facts.paranoid >= 2:
            return "paranoid", (f"perf_event_paranoid is {facts.paranoid} on this node and this "
                                "toolset has no CAP_PERFMON: " + advice(facts, "PERFMON")
                                + ", or lower kernel.perf_event_paranoid on the node")
        last = [line for line in text.splitlines() if line.strip()][-1:] or ["?"]
        return "denied", (f"the kernel refused perf_event_open on PID {pid} although this "
                          f"toolset holds {', '.join(sorted(facts.caps)) or 'no capabilities'} "
                          f"(perf_event_paranoid {facts.paranoid}): a security module "
                          f"(AppArmor, SELinux) denies it; perf said: "
                          f"{common.printable(last[0])[:200]}")
    last = [line for line in text.splitlines() if line.strip()][-1:] or ["no message"]
    return "tool-failed", f"perf record failed: {common.printable(last[0])[:300]}"
