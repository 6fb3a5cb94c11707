"""Which process the toolset's scripts profile when no --pid is given: the oldest process of
another container that is the app, not another toolset (the injected sidecar seen from an
attached one), not a mesh proxy started before the app. Real processes, so their real
/proc/PID/environ is what is read; only the cgroups (which container each is in) are given."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from types import ModuleType

import pytest

SLEEPER = [sys.executable, "-c", "import time; time.sleep(60)"]
NO_SUCH_PID = 2**22  # pid_max is at most 2**22: /proc has none of these, nothing real is read
Spawn = Callable[[dict[str, str]], int]  # a sleeping process with this environment: its pid


@pytest.fixture
def spawn() -> Iterator[Spawn]:
    children: list[subprocess.Popen[bytes]] = []

    def start(env: dict[str, str]) -> int:
        child = subprocess.Popen(SLEEPER, env={"PATH": os.environ.get("PATH", ""), **env})
        children.append(child)
        return child.pid

    yield start
    for child in children:
        child.kill()
        child.wait()


def pod(common: ModuleType, monkeypatch: pytest.MonkeyPatch,
        processes: list[tuple[int, str, str]]) -> None:
    """This pod's processes as the toolset sees them: (pid, comm, cgroup), oldest first."""
    records = []
    for ticks, (pid, comm, cgroup) in enumerate(processes):
        found = common.read_process(pid)
        assert found is not None
        records.append(replace(found, comm=comm, cgroup=cgroup, start_ticks=ticks))
    monkeypatch.setattr(common, "all_processes", lambda: records)
    monkeypatch.setattr(common, "own_cgroup", lambda: "0::/ours")
    # They share this test's mount namespace, which would make them ours: only cgroups count.
    monkeypatch.setattr(common, "is_ours", lambda process, mine: process.cgroup == mine)


def test_another_toolset_container_is_never_the_app(
        common: ModuleType, spawn: Spawn, monkeypatch: pytest.MonkeyPatch) -> None:
    """The injected sidecar starts before the app (it is put in front of the containers): an
    attached toolset took its entrypoint's python for the app. Every process of that
    container goes, its agent's child included, whatever its name."""
    start = spawn
    sidecar = start({"SIDECAR_DEBUG_TOOLSET_VARIANT": "full"})
    sidecar_child = start({})  # a tool that cleared its environment
    app = start({"HOME": "/app"})
    pod(common, monkeypatch, [(sidecar, "python3", "0::/pod/sidecar"),
                              (sidecar_child, "perf", "0::/pod/sidecar"),
                              (app, "books", "0::/pod/app")])
    assert [p.pid for p in common.app_processes()] == [app]
    assert common.find_target(None, None).pid == app


def test_a_toolset_whose_environment_is_unreadable_is_known_by_its_script(
        common: ModuleType) -> None:
    """Its scripts run under python3 (their comm): the command line names them."""
    sidecar = common.Process(pid=NO_SUCH_PID + 7, comm="python3",
                             cmdline=["python3", "/usr/local/bin/toolset-entrypoint"],
                             start_ticks=1, cgroup="0::/pod/sidecar", uid=0)
    assert common.is_toolset(sidecar)  # no such process: its environ cannot be opened
    agent = replace(sidecar, cmdline=["/usr/bin/python3", "/usr/local/bin/results-agent"])
    assert common.is_toolset(agent)
    assert not common.is_toolset(replace(sidecar, cmdline=["python3", "/app/app.py"]))
    assert not common.is_toolset(replace(sidecar, cmdline=["python3", "app.py",
                                                           "toolset-entrypoint"]))


def test_a_mesh_proxy_started_first_is_not_the_default_target(
        common: ModuleType, spawn: Spawn, monkeypatch: pytest.MonkeyPatch) -> None:
    start = spawn
    proxy, agent, app, worker = (start({}) for _ in range(4))
    pod(common, monkeypatch, [(agent, "pilot-agent", "0::/pod/istio-proxy"),
                              (proxy, "envoy", "0::/pod/istio-proxy"),
                              (app, "node", "0::/pod/app"), (worker, "node", "0::/pod/app")])
    assert common.find_target(None, None).pid == app
    # --name may still choose the proxy; alone, the proxy is what there is to profile.
    assert common.find_target(None, "^envoy$").pid == proxy
    pod(common, monkeypatch, [(agent, "pilot-agent", "0::/pod/istio-proxy"),
                              (proxy, "envoy", "0::/pod/istio-proxy")])
    assert common.find_target(None, None).pid == agent


def test_an_app_that_only_claims_a_toolset_name_hides_only_itself(
        common: ModuleType, spawn: Spawn, monkeypatch: pytest.MonkeyPatch) -> None:
    """Imitating the toolset takes the imitator's container out of the default choice,
    nothing more: the other containers' processes stay, and --pid reaches it."""
    start = spawn
    mimic = start({"SIDECAR_DEBUG_TOOLSET_VARIANT": "full"})
    app = start({})
    pod(common, monkeypatch, [(mimic, "books", "0::/pod/mimic"), (app, "books", "0::/pod/app")])
    assert common.find_target(None, None).pid == app
    assert common.find_target(mimic, None).pid == mimic


def test_processes_without_a_readable_cgroup_are_not_grouped(
        common: ModuleType, spawn: Spawn, monkeypatch: pytest.MonkeyPatch) -> None:
    """An empty cgroup (not readable) is no container: a toolset's unreadable cgroup takes no
    app process with it."""
    start = spawn
    sidecar = start({"SIDECAR_DEBUG_TOOLSET_VARIANT": "slim"})
    app = start({})
    pod(common, monkeypatch, [(sidecar, "python3", ""), (app, "books", "")])
    assert [p.pid for p in common.app_processes()] == [app]


def fake(pid: int, comm: str, ppid: int, ticks: int) -> dict[str, object]:
    return {"pid": NO_SUCH_PID + pid, "comm": comm, "cmdline": [comm], "start_ticks": ticks,
            "cgroup": "0::/pod/app", "uid": 10001, "ppid": NO_SUCH_PID + ppid}


@pytest.mark.parametrize(("tree", "expected"), [
    # tini -- node app.js: the app is tini's child.
    ([(10, "tini", 1), (11, "node", 10)], 11),
    # docker-entrypoint.sh without `exec`: sh -> sh -> java.
    ([(10, "sh", 1), (11, "bash", 10), (12, "java", 11), (13, "java", 12)], 12),
    # A wrapper whose child is gone is what there is; a non-wrapper keeps its children.
    ([(10, "sh", 1)], 10),
    ([(10, "nginx", 1), (11, "nginx", 10), (12, "nginx", 10)], 10),
])
def test_the_app_under_an_entrypoint_wrapper_is_the_default_target(
        common: ModuleType, monkeypatch: pytest.MonkeyPatch,
        tree: list[tuple[int, str, int]], expected: int) -> None:
    records = [common.Process(**fake(pid, comm, ppid, ticks))
               for ticks, (pid, comm, ppid) in enumerate(tree)]
    monkeypatch.setattr(common, "all_processes", lambda: records)
    monkeypatch.setattr(common, "own_cgroup", lambda: "0::/ours")
    assert common.find_target(None, None).pid == NO_SUCH_PID + expected
    # --name chooses, nothing is second-guessed.
    assert common.find_target(None, f"^{tree[0][1]}$").pid == NO_SUCH_PID + tree[0][0]


def test_a_master_whose_children_do_the_work_is_named_with_them(common: ModuleType) -> None:
    """nginx, gunicorn, PostgreSQL: the oldest process forks workers and waits. Recording it
    alone finds no samples; the line says where the CPU went and which --pid to take."""
    recording = importlib.import_module("recording")
    busy = "import time\nend = time.time() + 30\nwhile time.time() < end: pass\n"
    master = subprocess.Popen([sys.executable, "-c",
                               f"import subprocess, sys; subprocess.run([sys.executable, "
                               f"'-c', {busy!r}])"])
    try:
        deadline = time.monotonic() + 10
        while not common.descendants(master.pid, common.all_processes()):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        target = common.read_process(master.pid)
        before = recording.tree_cpu(target)
        time.sleep(0.6)
        [worker] = common.descendants(master.pid, common.all_processes())
        line = recording.work_elsewhere(master.pid, before)
        assert line is not None and line.endswith(f"pass --pid {worker.pid}"), line
        assert line.startswith(f"PID {master.pid} used 0.0") and f"PID {worker.pid} (" in line
        # The worker recorded itself: its own work, no line.
        own = recording.work_elsewhere(worker.pid, recording.tree_cpu(worker))
        assert own is None
    finally:
        master.kill()
        for process in common.descendants(master.pid, common.all_processes()):
            os.kill(process.pid, 9)
        master.wait()
