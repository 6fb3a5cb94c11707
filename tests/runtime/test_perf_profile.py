"""At the privilege a platform team grants (issue 23 items 1 and 4): the sidecar holds exactly
the `perf` profile's securityContext (CAP_PERFMON, CAP_SYS_PTRACE, CAP_SYSLOG; not privileged,
no CAP_IPC_LOCK), the app runs as uid 10001. perf records with the ring buffer the kernel's
locked-memory limit allows and says so; Python started as `python3 app.py`, with nothing of
ours, is named through py-spy, with --native where it works and without where it fails.

Numbers go to ~/.cache/sidecar-debug/flamegraph-runtimes.json (docs/techniques.md)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.runtime import podman_pod
from tests.runtime.podman_pod import PlayedPod
from tests.runtime.test_flamegraph_runtimes import CASES, Case, app_pod, record, save, self_weights

pytestmark = [pytest.mark.runtime, pytest.mark.timeout(900)]

# The perf profile's capabilities, as bits of CapEff (linux/capability.h): SYS_PTRACE 19,
# SYSLOG 34, PERFMON 38; besides the runtime's defaults (the profile drops none), none of those
# that would lift a limit: IPC_LOCK 14, SYS_ADMIN 21, SYS_RESOURCE 24, BPF 39.
PERF_PROFILE_CAPS = (1 << 19) | (1 << 34) | (1 << 38)
NOT_GRANTED = (1 << 14) | (1 << 21) | (1 << 24) | (1 << 39)


def perf_profile_pod(case: Case, name: str, runtime: str | None) -> dict[str, Any]:
    pod = app_pod(case, name)
    if runtime is None:
        pod["metadata"]["annotations"].pop("sidecar-debug.io/runtime", None)
    injected = podman_pod.inject(pod, "perf", runtime, podman_pod.TOOLSET_IMAGE)
    sidecar = injected["spec"]["containers"][0]
    assert sidecar["securityContext"]["capabilities"]["add"] == ["PERFMON", "SYS_PTRACE",
                                                                 "SYSLOG"]
    assert not sidecar["securityContext"].get("privileged")
    return injected


def assert_perf_profile_sidecar(pod: PlayedPod) -> None:
    status = pod.exec("cat", "/proc/self/status", check=True).stdout
    effective = next(line for line in status.splitlines() if line.startswith("CapEff:"))
    mask = int(effective.split()[1], 16)
    assert mask & PERF_PROFILE_CAPS == PERF_PROFILE_CAPS and not mask & NOT_GRANTED, effective
    assert pod.exec("id", "-u").stdout.strip() == "0"


@pytest.fixture
def node_perf_pod(runtime_images: None, pod_workdir: Path) -> Iterator[PlayedPod]:
    case = CASES["node"]
    injected = perf_profile_pod(case, podman_pod.unique("pp-node"), "node")
    with podman_pod.played(injected, pod_workdir) as played:
        played.wait_for_log(r'"rate"', timeout=120)
        yield played


def test_perf_profile_records_node_with_the_buffer_the_kernel_allows(
        node_perf_pod: PlayedPod) -> None:
    pod, case = node_perf_pod, CASES["node"]
    assert_perf_profile_sidecar(pod)
    recorded = record(pod)
    meta = recorded.meta
    buffer = meta["ring_buffer"]
    save("node-perf-profile", {key: meta.get(key) for key in (
        "named_share", "samples", "lost_samples", "ring_buffer", "duration")})
    assert meta["technique"] == "perf" and meta["user_only"] is False, meta
    assert meta["named_share"] >= case.named, meta
    weights = self_weights(recorded.folded)
    assert case.hot in max(weights, key=lambda leaf: weights[leaf]), weights
    # No CAP_IPC_LOCK: the locked-memory limit applies, and the run says which buffer it got.
    assert "no CAP_IPC_LOCK" in buffer["limit"], buffer
    assert 512 <= buffer["kib"] <= buffer["wanted_kib"], buffer
    assert buffer["summary"] in recorded.output.splitlines(), recorded.output
    assert buffer["summary"].endswith(f"; {meta['lost_samples']} samples lost")
    assert pod.exec("stat", "-c", "%u", f"/proc/{meta['pid']}").stdout.strip() == "10001"


def test_perf_profile_doctor_says_perf_works_and_which_buffer(node_perf_pod: PlayedPod) -> None:
    result = node_perf_pod.exec("doctor", "--json")
    report = json.loads(result.stdout)
    assert result.returncode == 0 and report["expected"] == ["perf"], result.stdout
    assert report["techniques"]["perf"]["works"], report["techniques"]["perf"]
    checks = {check["check"]: check for check in report["checks"]}
    assert checks["perf ring buffer"]["status"] == "ok", checks["perf ring buffer"]
    assert checks["perf ring buffer"]["detail"].startswith("perf ring buffer ")


def test_perf_profile_attached_to_another_uid_without_ptrace_names_its_cause(
        runtime_images: None, pod_workdir: Path) -> None:
    """The `perf` profile's CAP_SYS_PTRACE taken away (as a policy might): the line says the
    profile grants it and something took it, and never tells the pod to use the perf profile."""
    case = CASES["c"]
    injected = perf_profile_pod(case, podman_pod.unique("pp-noptrace"), None)
    injected["spec"]["containers"][0]["securityContext"]["capabilities"]["add"] = [
        "PERFMON", "SYSLOG"]
    with podman_pod.played(injected, pod_workdir) as played:
        played.wait_for_log(r'"rate"')
        result = played.exec("flamegraph", "--seconds", "1", "--out", "/tmp/fg-denied")
        assert result.returncode == 4, result.stdout + result.stderr
        errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
        assert len(errors) == 1, result.stderr
        assert "the `perf` profile grants CAP_SYS_PTRACE, yet this container lacks it" in (
            errors[0]), errors
        assert "use the `perf`" not in result.stderr
        doctor = played.exec("doctor")
        assert doctor.returncode == 1 and "use the `perf`" not in doctor.stdout, doctor.stdout


# --- Python with nothing of ours: `python3 app.py`, no hint, no restart ---------------------

PYTHONS = {"python3.11": CASES["python3.11"],
           # the trixie sample's own command (python3 /app/app.py), no PYTHONPERFSUPPORT
           "python3.13": Case("python-trixie", "fib_recursive", 24, technique="py-spy")}


@pytest.fixture(params=sorted(PYTHONS))
def python_pod(request: pytest.FixtureRequest, runtime_images: None,
               pod_workdir: Path) -> Iterator[tuple[str, Case, PlayedPod]]:
    case = PYTHONS[request.param]
    injected = perf_profile_pod(case, podman_pod.unique("pp-py"), None)
    app = injected["spec"]["containers"][1]
    assert not any(item["name"].startswith("PYTHON") and item["name"] != "PYTHONUNBUFFERED"
                   for item in app.get("env") or []), app
    with podman_pod.played(injected, pod_workdir) as played:
        played.wait_for_log(r'"rate"', timeout=120)
        yield request.param, case, played


def named_python(pod: PlayedPod, name: str, case: Case, *extra: str,
                 out: str = "/tmp/fg") -> dict[str, Any]:
    recorded = record(pod, *extra, out=out)
    meta = recorded.meta
    weights = self_weights(recorded.folded)
    assert meta["technique"] == "py-spy", meta
    assert meta["runtime"].startswith(name[:7]), meta
    assert meta["named_share"] >= 0.95, (meta, recorded.folded[:3000])
    # The innermost Python frame of each stack (native frames, --native, come below it).
    python_leaves: dict[str, int] = {}
    for line in recorded.folded.splitlines():
        stack, _, count = line.rpartition(" ")
        frames = [frame for frame in stack.split(";") if ".py:" in frame]
        if frames and count.isdigit():
            python_leaves[frames[-1]] = python_leaves.get(frames[-1], 0) + int(count)
    assert case.hot in max(python_leaves, key=lambda leaf: python_leaves[leaf]), weights
    assert pod.exec("stat", "-c", "%u", f"/proc/{meta['pid']}").stdout.strip() == "10001"
    return {"meta": meta, "output": recorded.output}


def test_plain_python_is_named_with_native_frames_where_they_work(
        python_pod: tuple[str, Case, PlayedPod]) -> None:
    name, case, pod = python_pod
    assert_perf_profile_sidecar(pod)
    result = named_python(pod, name, case)
    meta = result["meta"]
    save(f"{name}-plain", {key: meta.get(key) for key in (
        "named_share", "samples", "native", "callgraph", "mean_depth", "duration", "warnings")})
    # Where --native fails, the run says so in one line (meta and summary), and still names.
    if meta["native"]:
        assert "Python frames only" not in result["output"]
    else:
        lines = [line for line in result["output"].splitlines() if "Python frames only" in line]
        assert len(lines) == 1, result["output"]


# py-spy as it fails on Debian bookworm's python3.11 for the reporter ("UNW_EINVAL"),
# wrapped in front of the real one: without --native it is the real py-spy.
FAILING_NATIVE = """#!/bin/sh
for arg in "$@"; do
  if [ "$arg" = "--native" ]; then
    echo "Error: UNW_EINVAL: unsupported operation or bad value"; exit 1
  fi
done
exec /usr/local/bin/py-spy "$@"
"""


def test_python_where_native_unwinding_fails_is_named_without_it(
        python_pod: tuple[str, Case, PlayedPod]) -> None:
    name, case, pod = python_pod
    real = pod.exec("sh", "-c", "command -v py-spy", check=True).stdout.strip()
    assert real == "/usr/local/bin/py-spy"
    pod.exec("sh", "-c", 'mkdir -p /run/fake && printf "%s" "$1" > /run/fake/py-spy && '
             "chmod +x /run/fake/py-spy", "sh", FAILING_NATIVE, check=True)
    result = pod.exec("env", "PATH=/run/fake:/usr/local/bin:/usr/bin:/bin", "flamegraph",
                      "--seconds", "5", "--out", "/tmp/fg-nonative", timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    meta = json.loads(pod.exec("cat", "/tmp/fg-nonative/meta.json", check=True).stdout)
    assert meta["native"] is False and meta["named_share"] >= 0.95, meta
    lines = [line for line in result.stdout.splitlines() if "Python frames only" in line]
    assert len(lines) == 1 and "UNW_EINVAL" in lines[0], result.stdout
    # The probe caught it: one recording, not a failed --native one first.
    assert result.stderr.count("recording 5 s") == 1, result.stderr


# How real images start apps: a master forking its worker and waiting for it (gunicorn, nginx,
# PostgreSQL), and under it a shell entrypoint that does not `exec`.
MASTER = ("import subprocess, sys; "
          "subprocess.run([sys.executable, '/app/cpu.py'], check=False)")


def test_a_master_and_a_shell_wrapper_lead_to_the_process_that_works(
        runtime_images: None, pod_workdir: Path) -> None:
    """The app as uid 10001, the `perf` profile: a shell entrypoint without `exec` starts a
    Python master that runs the CPU-bound worker as its child. The default target is the
    master (the shell is passed over); recording it finds (almost) nothing, and one line says
    where the CPU went and which --pid to take; with it, the worker's graph is named."""
    case = CASES["python3.11"]
    pod = perf_profile_pod(case, podman_pod.unique("pp-master"), None)
    app = next(c for c in pod["spec"]["containers"] if c["name"] == "app")
    app["command"] = ["sh", "-c", f'python3 -c "{MASTER}"; echo master gone']
    with podman_pod.played(pod, pod_workdir) as played:
        played.wait_for_log(r'"rate"', timeout=120)
        assert_perf_profile_sidecar(played)
        listing = played.exec("ps", "-eo", "pid=,ppid=,args=", check=True).stdout
        rows = [line.split(None, 2) for line in listing.strip().splitlines()]
        shell = next(pid for pid, _, args in rows if args.startswith("sh -c python3"))
        master = next(pid for pid, ppid, args in rows if ppid == shell)
        worker = next(pid for pid, ppid, _ in rows if ppid == master)
        idle = played.exec("flamegraph", "--seconds", "2", "--out", "/tmp/fg-master")
        assert f"target: PID {master} (python3)" in idle.stderr, idle.stderr
        # py-spy may catch the master in its wait a few times: then the graph of those
        # samples and the line as a warning; none: the line ends the error (no-samples).
        elsewhere = (rf"PID {master} used 0\.0\d s of CPU while recording, its child "
                     rf"processes [0-9.]+ s \(PID {worker} \(python3\) [0-9.]+ s\): the work "
                     rf"is in them; pass --pid {worker}")
        meta = json.loads(played.exec("cat", "/tmp/fg-master/meta.json", check=True).stdout)
        if idle.returncode == 0:
            [warning] = [line for line in idle.stdout.splitlines() if "child processes" in line]
            assert re.fullmatch(f"warning: {elsewhere}", warning), warning
            assert [w for w in meta["warnings"] if re.fullmatch(elsewhere, w)], meta
        else:
            assert idle.returncode == 1, idle.stdout + idle.stderr
            [error] = [line for line in idle.stderr.splitlines() if line.startswith("error:")]
            assert re.fullmatch(rf"error: no samples of PID {master} in 2 s: {elsewhere}",
                                error), error
            assert meta["error"]["reason"] == "no-samples", meta
        busy = played.exec("flamegraph", "--seconds", "2", "--pid", worker, "--out",
                           "/tmp/fg-worker")
        assert busy.returncode == 0, busy.stdout + busy.stderr
        assert "fib_recursive" in busy.stdout.splitlines()[1], busy.stdout
