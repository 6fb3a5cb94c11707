"""perf at the privilege a profile grants: the ring buffer sized to the kernel's locked-memory
limit (tried, halved on the kernel's refusal, perf's default last) with the samples lost
reported; py-spy without --native where native unwinding fails; and the one line that names the
real cause of a failure, never a profile the pod already has. Real perf in a real `perf`-profile
pod: tests/runtime/test_flamegraph_runtimes.py."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.unit.toolset.conftest import load_script
from tests.unit.toolset.test_toolset_unwind import (
    JIT_END,
    JIT_START,
    STACK_BASE,
    attr_bytes,
    fp_stack,
    mmap2,
    perf_file,
    record,
    sample,
)


@pytest.fixture(scope="module")
def limits(common: ModuleType) -> ModuleType:
    import importlib

    return importlib.import_module("perf_limits")


@pytest.fixture(scope="module")
def recording(common: ModuleType) -> ModuleType:
    import importlib

    return importlib.import_module("recording")


def facts(limits: ModuleType, **changes: Any) -> Any:
    """A `perf`-profile toolset as this machine runs it: uid 0, 2 CPUs, perf_event_mlock_kb 516,
    RLIMIT_MEMLOCK 8 MiB, perf_event_paranoid 2, no seccomp filter."""
    values: dict[str, Any] = {
        "caps": frozenset({"PERFMON", "SYS_PTRACE", "SYSLOG"}), "euid": 0, "paranoid": 2,
        "mlock_kb": 516, "cpus": 2, "memlock_kib": 8192, "seccomp": False,
        "kernel": "6.1.0-18-amd64", "profile": "perf", "attached": False}
    values.update(changes)
    return limits.Facts(**values)


# --- the ring buffer ------------------------------------------------------------------------------

def test_the_plan_starts_at_the_largest_buffer_the_limit_admits(limits: ModuleType) -> None:
    # Measured in a `perf`-profile container here (2 CPUs, 516 KiB, 8 MiB): -m 8M refused
    # ("Permission error mapping pages"), -m 4M, 2M, 1M, 512K recorded.
    plan = limits.buffer_plan(facts(limits))
    assert plan.sizes == [4096, 2048, 1024, None] and plan.skipped == [8192]
    assert limits.fits(facts(limits), 4096) and not limits.fits(facts(limits), 8192)
    # CAP_IPC_LOCK (the full profile), no RLIMIT_MEMLOCK, or paranoid -1 lift the limit.
    for lifted in (facts(limits, caps=frozenset({"IPC_LOCK"})), facts(limits, memlock_kib=None),
                   facts(limits, paranoid=-1)):
        assert limits.buffer_plan(lifted).sizes == [8192, 4096, 2048, 1024, None]
        assert limits.limit_text(lifted).startswith("no limit") or lifted.memlock_kib is None
    # 64 CPUs share the same 8 MiB beyond their per-CPU budget: only perf's default fits.
    assert limits.buffer_plan(facts(limits, cpus=64)).sizes == [None]
    # perf's default follows perf_event_mlock_kb (less a page, a power of two of pages).
    assert limits.default_kib(facts(limits)) == 512
    assert limits.default_kib(facts(limits, mlock_kb=2052)) == 2048
    assert limits.default_kib(facts(limits, mlock_kb=1000)) == 512
    assert limits.buffer_plan(facts(limits, mlock_kb=2052), 8192).sizes[-2:] == [4096, None]


def test_buffer_lines_say_size_limit_and_loss(limits: ModuleType) -> None:
    shrunk = limits.buffer_line(facts(limits), 4096, 3)
    assert shrunk == ("perf ring buffer 4 MiB per CPU, not 8 MiB: the kernel's locked-memory "
                      "limit (perf_event_mlock_kb 516 KiB x 2 CPUs shared by every process of "
                      "uid 0 on the node, then RLIMIT_MEMLOCK 8 MiB; no CAP_IPC_LOCK); "
                      "3 samples lost")
    assert limits.buffer_line(facts(limits), 8192, 0) == (
        "perf ring buffer 8 MiB per CPU; 0 samples lost")


FAKE_PERF = """#!{python}
import os, sys, time
args = sys.argv[1:]
log = os.environ["FAKE_LOG"]
with open(log, "a") as handle:
    handle.write(" ".join(args) + "\\n")
if args[:1] == ["version"]:
    print("perf version 6.1.fake"); sys.exit(0)
size = args[args.index("-m") + 1] if "-m" in args else "512K"
kib = int(size[:-1]) * (1024 if size.endswith("M") else 1)
if kib > int(os.environ["FAKE_LIMIT_KIB"]):
    sys.stderr.write("Permission error mapping pages.\\nConsider increasing "
                     "/proc/sys/kernel/perf_event_mlock_kb,\\nor try again with a smaller value "
                     "of -m/--mmap_pages.\\n(current value: %d,0)\\n" % (kib // 4))
    sys.exit(255)
if "--overwrite" in args:
    time.sleep(30)
if "-o" in args and os.environ.get("FAKE_DATA"):
    with open(os.environ["FAKE_DATA"], "rb") as source, open(args[args.index("-o") + 1],
                                                               "wb") as out:
        out.write(source.read())
elif "-o" in args:
    open(args[args.index("-o") + 1], "wb").close()
sys.exit(0)
"""


def fake_tool(directory: Path, name: str, text: str) -> Path:
    directory.mkdir(exist_ok=True)
    path = directory / name
    path.write_text(text.replace("{python}", sys.executable))
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.fixture
def fake_perf(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    def make(limit_kib: int, data: bytes | None = None) -> Path:
        fake_tool(tmp_path / "bin", "perf", FAKE_PERF)
        monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
        monkeypatch.setenv("FAKE_LIMIT_KIB", str(limit_kib))
        monkeypatch.setenv("FAKE_LOG", str(tmp_path / "perf.log"))
        if data is not None:
            (tmp_path / "fake.data").write_bytes(data)
            monkeypatch.setenv("FAKE_DATA", str(tmp_path / "fake.data"))
        return tmp_path / "perf.log"
    return make


def target(common: ModuleType, uid: int = 10001) -> Any:
    return common.Process(pid=os.getpid(), comm="app", cmdline=["app"], start_ticks=1,
                          cgroup="", uid=uid)


def recorded_perf_data(lost: int) -> bytes:
    stack, bp = fp_stack([JIT_START + 0x210])
    return perf_file([
        mmap2(os.getpid(), JIT_START, JIT_END, "//anon", prot=7),
        sample(os.getpid(), 100, JIT_START + 0x110, bp, STACK_BASE, stack),
        record(2, 0, (7).to_bytes(8, "little") + lost.to_bytes(8, "little")),  # PERF_RECORD_LOST
        record(13, 0, (lost - 1).to_bytes(8, "little")),  # LOST_SAMPLES: overlaps LOST
    ], [(attr_bytes(1), [1])])


def test_recording_halves_the_buffer_the_kernel_refuses_and_counts_lost_samples(
        limits: ModuleType, recording: ModuleType, common: ModuleType, fake_perf: Any,
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # The kernel's budget is smaller than the estimate says (another perf of uid 0 on the node
    # holds part of it): 4 MiB is tried and refused, 2 MiB records.
    log = fake_perf(2048, recorded_perf_data(lost=5))
    monkeypatch.setattr(limits, "gather", lambda: facts(limits))
    work = tmp_path / "run"
    work.mkdir()
    options = recording.Options(target=target(common), seconds=0.1, technique="perf",
                                progress=lambda line: None)
    run = recording.record_run(options, str(work))
    tried = [line.split(" -m ")[1].split()[0] for line in log.read_text().splitlines()
             if " -m " in line]
    assert tried == ["4096K", "2048K"]
    meta = json.loads((work / "meta.json").read_text())
    assert meta["ring_buffer"]["kib"] == 2048 and meta["ring_buffer"]["refused_kib"] == [4096]
    assert meta["ring_buffer"]["over_limit_kib"] == [8192]
    assert meta["lost_samples"] == 5
    assert meta["ring_buffer"]["summary"].startswith("perf ring buffer 2 MiB per CPU, not 8 MiB")
    assert meta["ring_buffer"]["summary"].endswith("; 5 samples lost")
    assert any("5 samples lost" in warning for warning in run.warnings)
    text = load_script("flamegraph").summary(target(common), run, 5)
    assert meta["ring_buffer"]["summary"] in text.splitlines()


def test_recording_refused_even_at_perfs_default_names_the_locked_memory_limit(
        limits: ModuleType, recording: ModuleType, common: ModuleType, fake_perf: Any,
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    log = fake_perf(256)
    monkeypatch.setattr(limits, "gather", lambda: facts(limits))
    options = recording.Options(target=target(common), seconds=0.1, technique="perf",
                                progress=lambda line: None)
    with pytest.raises(recording.RecordingFailed) as failure:
        recording.record_run(options, str(tmp_path))
    assert failure.value.reason == "memlock" and failure.value.code == 4
    message = failure.value.message
    assert "locked-memory limit" in message and "perf_event_mlock_kb 516" in message
    assert "RLIMIT_MEMLOCK 8 MiB" in message and "profile" not in message
    # Every size of the plan once, perf's default (no -m) last.
    runs = [line for line in log.read_text().splitlines() if line.startswith("record")]
    assert ["-m 4096K" in runs[0], "-m 2048K" in runs[1], "-m 1024K" in runs[2]] == [True] * 3
    assert len(runs) == 4 and " -m " not in runs[3]


def test_doctor_finds_the_buffer_the_kernel_maps(limits: ModuleType, common: ModuleType,
                                                 fake_perf: Any,
                                                 monkeypatch: pytest.MonkeyPatch,
                                                 tmp_path: Path) -> None:
    fake_perf(1024)
    monkeypatch.setenv("SIDECAR_DEBUG_PRIVATE_DIR", str(tmp_path / "private"))
    doctor = load_script("doctor")
    kib, refused, problem = doctor.ring_buffer("perf", os.getpid(), facts(limits))
    assert (kib, refused, problem) == (1024, [4096, 2048], None)
    monkeypatch.setenv("FAKE_LIMIT_KIB", "100")
    kib, refused, problem = doctor.ring_buffer("perf", os.getpid(), facts(limits))
    assert kib == 0 and "locked-memory limit" in problem


def test_trap_records_with_the_buffer_the_kernel_maps_and_says_what_it_keeps(
        limits: ModuleType, common: ModuleType, fake_perf: Any,
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    log = fake_perf(2048)
    monkeypatch.setattr(limits, "gather", lambda: facts(limits, caps=frozenset({"IPC_LOCK"})))
    trap = load_script("trap")
    args = trap.parse_args(["--cpu", "50", "--seconds-before", "30"])
    pages = trap.ring_pages(args.frequency, 35)
    assert pages == 4096  # 16 MiB per CPU asked
    recorder, note = trap.start_recorder("perf", args, target(common), str(tmp_path / "d"),
                                         pages, str(tmp_path / "perf-record.log"))
    try:
        assert recorder.poll() is None
        assert " -m 2048K " in log.read_text().splitlines()[-1]
        assert note.startswith("perf ring buffer 2 MiB per CPU, not 16 MiB")
        assert note.endswith("it keeps about 5 s at 99 Hz")
    finally:
        recorder.kill()
        recorder.wait()


# --- py-spy without --native where native unwinding fails --------------------------------------

FAKE_PYSPY = """#!{python}
import os, sys
args = sys.argv[1:]
with open(os.environ["FAKE_LOG"], "a") as handle:
    handle.write(" ".join(args) + "\\n")
if args[:1] == ["--version"]:
    print("py-spy 0.4.3"); sys.exit(0)
native_fails = os.environ["FAKE_NATIVE_FAILS"]
if "--native" in args and (args[0] in native_fails.split(",")):
    print("Error: UNW_EINVAL: unsupported operation or bad value"); sys.exit(1)
if os.environ.get("FAKE_DENIED"):
    print("Error: Permission denied (os error 13)"); sys.exit(1)
if args[0] == "record":
    with open(args[args.index("--output") + 1], "w") as out:
        out.write("<module> (app.py:9);work (app.py:5);fib (app.py:2) 40\\n")
sys.exit(0)
"""


@pytest.fixture
def fake_pyspy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    def make(native_fails: str, denied: bool = False) -> Path:
        fake_tool(tmp_path / "bin", "py-spy", FAKE_PYSPY)
        monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
        monkeypatch.setenv("FAKE_LOG", str(tmp_path / "py-spy.log"))
        monkeypatch.setenv("FAKE_NATIVE_FAILS", native_fails)
        if denied:
            monkeypatch.setenv("FAKE_DENIED", "1")
        return tmp_path / "py-spy.log"
    return make


@pytest.mark.parametrize("fails", ["dump,record", "record"], ids=["probe", "record"])
def test_pyspy_records_without_native_where_native_fails(
        limits: ModuleType, recording: ModuleType, common: ModuleType, fake_pyspy: Any,
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, fails: str) -> None:
    log = fake_pyspy(fails)
    monkeypatch.setattr(limits, "gather", lambda: facts(limits))
    options = recording.Options(target=target(common), seconds=0.1, technique="py-spy",
                                progress=lambda line: None)
    run = recording.record_run(options, str(tmp_path))
    records = [line for line in log.read_text().splitlines() if line.startswith("record")]
    # The probe spares the failing --native recording; without it, the recording is redone.
    assert ["--native" in line for line in records] == (
        [False] if fails.startswith("dump") else [True, False])
    assert run.meta["native"] is False and run.meta["named_share"] == 1.0
    assert run.meta["callgraph"] == "py-spy (Python frames only)"
    assert run.warnings == ["Python frames only: py-spy --native failed on this process (Error: "
                            "UNW_EINVAL: unsupported operation or bad value), so native (C) "
                            "frames are not shown"]


def test_pyspy_keeps_native_where_it_works_and_a_refusal_is_not_retried(
        limits: ModuleType, recording: ModuleType, common: ModuleType, fake_pyspy: Any,
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    log = fake_pyspy("")
    monkeypatch.setattr(limits, "gather", lambda: facts(limits))
    options = recording.Options(target=target(common), seconds=0.1, technique="py-spy",
                                progress=lambda line: None)
    run = recording.record_run(options, str(tmp_path))
    assert run.meta["native"] is True and run.warnings == []
    assert [line for line in log.read_text().splitlines() if line.startswith("record")][0]
    log.unlink()
    fake_pyspy("", denied=True)
    with pytest.raises(recording.RecordingFailed) as failure:
        recording.record_run(options, str(tmp_path))
    assert failure.value.reason == "ptrace"
    assert "use the `perf`" not in failure.value.message  # the pod's profile is perf
    assert sum(line.startswith("record") for line in log.read_text().splitlines()) == 1


# --- the one line -------------------------------------------------------------------------------

PERMISSION_DENIED = ("Error:\nNo permission to enable cpu-clock event.\n\nYou may not have "
                     "permission to collect stats.\nConsider tweaking "
                     "/proc/sys/kernel/perf_event_paranoid")
MAPPING = "Permission error mapping pages.\n(current value: 2048,0)"

CAUSES: list[tuple[str, dict[str, Any], str, int, str, list[str]]] = [
    # id, facts, perf's stderr, the app's uid, reason, what the line must say
    ("memlock", {}, MAPPING, 10001, "memlock",
     ["locked-memory limit", "perf_event_mlock_kb 516 KiB x 2 CPUs", "RLIMIT_MEMLOCK 8 MiB",
      "uid 0", "no CAP_IPC_LOCK", "512 KiB"]),
    ("seccomp", {"seccomp": True}, PERMISSION_DENIED, 10001, "seccomp",
     ["seccomp filter", "the `perf` profile grants an unconfined seccomp profile",
      "took it away"]),
    ("seccomp-lttng", {"seccomp": True, "profile": "lttng", "caps": frozenset()},
     PERMISSION_DENIED, 0, "seccomp",
     ["seccomp filter", "the `lttng` profile does not grant", "use the `perf` or `full`"]),
    ("ptrace", {"caps": frozenset({"PERFMON", "SYSLOG"})}, PERMISSION_DENIED, 10001, "ptrace",
     ["uid 10001", "uid 0", "CAP_SYS_PTRACE", "may not read the app's memory maps",
      "the `perf` profile grants CAP_SYS_PTRACE"]),
    ("ptrace-no-perfmon", {"caps": frozenset({"SYSLOG"}), "profile": "lttng"},
     PERMISSION_DENIED, 10001, "ptrace",
     ["uid 10001", "lets perf open no events", "use the `perf` or `full` profile"]),
    ("old-kernel", {"caps": frozenset({"SYS_PTRACE", "SYSLOG"}), "kernel": "5.4.0-150"},
     PERMISSION_DENIED, 10001, "paranoid",
     ["perf_event_paranoid is 2", "CAP_PERFMON", "kernel 5.4.0-150 predates (5.8)",
      "use the `full` profile"]),
    ("full-stripped", {"caps": frozenset({"SYS_PTRACE"}), "profile": "full"},
     PERMISSION_DENIED, 10001, "paranoid",
     ["the `full` profile is privileged, yet this container lacks CAP_PERFMON"]),
    ("no-profile", {"caps": frozenset({"SYS_PTRACE"}), "profile": "lttng"}, PERMISSION_DENIED,
     10001, "paranoid", ["perf_event_paranoid is 2", "use the `perf` or `full` profile"]),
    ("attached-1.20", {"caps": frozenset({"CHOWN"}), "attached": True, "profile": "perf"},
     PERMISSION_DENIED, 10001, "ptrace", ["uid 10001", "Kubernetes < 1.23", "ephemeral"]),
    ("lsm", {}, PERMISSION_DENIED, 10001, "denied",
     ["security module", "PERFMON, SYSLOG, SYS_PTRACE", "perf_event_paranoid 2"]),
    ("gone", {}, "Couldn't record: No such process", 10001, "no-target", ["exited"]),
    ("other", {}, "perf: some other failure\nlast words", 10001, "tool-failed", ["last words"]),
]


@pytest.mark.parametrize("cause", CAUSES, ids=[cause[0] for cause in CAUSES])
def test_each_cause_is_its_one_line(limits: ModuleType, recording: ModuleType,
                                    cause: tuple[str, dict[str, Any], str, int, str,
                                                 list[str]]) -> None:
    _, changes, stderr, app_uid, reason, says = cause
    found, line = limits.diagnose(facts(limits, **changes), stderr, 4242, app_uid)
    assert found == reason and reason in recording.REASONS
    for text in says:
        assert text in line, (text, line)
    assert "\n" not in line


@pytest.mark.parametrize("profile", ["perf", "bcc", "full"])
def test_a_pod_on_a_perf_profile_is_never_told_to_use_one(limits: ModuleType,
                                                          profile: str) -> None:
    caps_choices = [frozenset(), frozenset({"SYS_PTRACE"}), frozenset({"PERFMON"}),
                    frozenset({"PERFMON", "SYS_PTRACE"})]
    for caps in caps_choices:
        for seccomp in (False, True):
            for kernel in ("5.4.0", "6.1.0"):
                for stderr in (PERMISSION_DENIED, MAPPING):
                    for paranoid in (2, 3):
                        known = facts(limits, caps=caps, seccomp=seccomp, kernel=kernel,
                                      profile=profile, paranoid=paranoid)
                        _, line = limits.diagnose(known, stderr, 4242, 10001)
                        assert "use the `perf`" not in line, line
                        assert f"use the `{profile}`" not in line, line
                        for missing in ("PERFMON", "SYS_PTRACE", "seccomp"):
                            advice = limits.advice(known, missing)
                            assert f"use the `{profile}`" not in advice, advice


def test_perf_access_refusals_follow_the_profile(limits: ModuleType, recording: ModuleType,
                                                 common: ModuleType,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(limits, "gather", lambda: facts(
        limits, caps=frozenset({"PERFMON"}), profile="perf"))
    with pytest.raises(recording.RecordingFailed) as failure:
        recording.perf_access(target(common))
    assert failure.value.reason == "ptrace"
    assert "the `perf` profile grants CAP_SYS_PTRACE, yet" in failure.value.message
    monkeypatch.setattr(limits, "gather", lambda: facts(
        limits, caps=frozenset({"SYS_PTRACE"}), profile="lttng", paranoid=3))
    with pytest.raises(recording.RecordingFailed) as failure:
        recording.perf_access(target(common))
    assert failure.value.reason == "paranoid"
    assert "use the `perf` or `full` profile" in failure.value.message
