"""The schedules pass against a fake cluster: due schedules run once per cron minute (across a
restart too), in the selected pods with a toolset container, and their stacks land in the
store; bad annotations are reported once; retention applies. ApiCluster's recording is checked
against a fake session: the command run in the sidecar and the copy-back."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from webhook import constants
from webhook.results import folded
from webhook.results.store import Store
from webhook.schedules import runner
from webhook.schedules.runner import ApiCluster, Profile, ProfileError
from webhook.schedules.spec import Schedule, parse

T0 = datetime(2026, 12, 3, 7, 0, 20, tzinfo=UTC)
KEY = constants.ANNOTATION_SCHEDULE


def pod(name: str, labels: dict[str, str], *, toolset: bool = True, phase: str = "Running",
        annotation: str | None = None, namespace: str = "shop") -> dict[str, Any]:
    containers = [{"name": "app"}] + ([{"name": "debug-toolset"}] if toolset else [])
    metadata: dict[str, Any] = {"name": name, "namespace": namespace, "labels": labels}
    if annotation:
        metadata["annotations"] = {KEY: annotation}
    return {"metadata": metadata, "spec": {"containers": containers}, "status": {"phase": phase}}


@dataclass
class FakeCluster:
    namespace_annotation: str | None = None
    pod_list: list[dict[str, Any]] = field(default_factory=list)
    recorded: list[tuple[str, str, str, int]] = field(default_factory=list)
    fail: set[str] = field(default_factory=set)

    def namespaces(self) -> list[dict[str, Any]]:
        metadata: dict[str, Any] = {"name": "shop"}
        if self.namespace_annotation:
            metadata["annotations"] = {KEY: self.namespace_annotation}
        return [{"metadata": metadata}, {"metadata": {"name": "default"}}]

    def pods(self) -> list[dict[str, Any]]:
        return self.pod_list

    def toolset_container(self, pod: Any, schedule: Schedule) -> str | None:
        names = [c["name"] for c in pod["spec"]["containers"]]
        return "debug-toolset" if "debug-toolset" in names else None

    def profile(self, namespace: str, pod: str, schedule: Schedule, work: Path) -> Profile:
        if pod in self.fail:
            raise ProfileError("flamegraph exited 4: perf is not permitted here")
        self.recorded.append((namespace, pod, schedule.technique, schedule.duration))
        return Profile(stacks={("main", f"hot_{pod.replace('-', '_')}"): 42},
                       container="debug-toolset", summary="42 fib\n")


def run(cluster: FakeCluster, now: datetime, results: Path,
        environ: dict[str, str] | None = None) -> None:
    runner.tick(None, now, results, cluster=cluster, background=False, environ=environ or {})


@pytest.fixture(autouse=True)
def fresh_runner(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runner, "_RUNNER", runner.Runner())


def web_pods() -> list[dict[str, Any]]:
    return [pod("web-2", {"app": "web"}), pod("web-1", {"app": "web"}),
            pod("web-3", {"app": "web"}), pod("db-0", {"app": "db"}),
            pod("web-0", {"app": "web"}, toolset=False), pod("web-9", {"app": "web"},
                                                             phase="Pending")]


def test_namespace_schedule_runs_once_per_cron_minute(tmp_path: Path) -> None:
    cluster = FakeCluster('{"cron": "*/10 * * * *", "duration": "20s", "maxPods": 2, '
                          '"selector": {"matchLabels": {"app": "web"}}}', web_pods())
    run(cluster, T0 - timedelta(minutes=5), tmp_path)  # first seen: starts from now
    assert cluster.recorded == []
    run(cluster, T0, tmp_path)  # 07:00 is due
    # by name, running, with a toolset, matching, at most 2
    assert cluster.recorded == [("shop", "web-1", "perf", 20), ("shop", "web-2", "perf", 20)]
    run(cluster, T0 + timedelta(seconds=30), tmp_path)  # same minute: nothing again
    run(cluster, T0 + timedelta(minutes=5), tmp_path)
    assert len(cluster.recorded) == 2
    runs = Store(tmp_path).runs()
    assert [r.pod for r in runs] == ["web-2", "web-1"] or [r.pod for r in runs] == [
        "web-1", "web-2"]
    meta = runs[0].meta
    assert meta["schedule"] == "namespace/shop#0" and meta["trigger"] == "schedule"
    assert meta["due"] == "2026-12-03T07:00:00+00:00" and meta["duration"] == 20
    assert runs[0].stacks() == {("main", f"hot_{runs[0].pod.replace('-', '_')}"): 42}


def test_a_new_leader_does_not_repeat_a_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                            ) -> None:
    cluster = FakeCluster('{"cron": "0 * * * *"}', [pod("web-1", {})])
    run(cluster, T0 - timedelta(minutes=1), tmp_path)
    run(cluster, T0, tmp_path)
    assert len(cluster.recorded) == 1
    monkeypatch.setattr(runner, "_RUNNER", runner.Runner())  # another replica took over
    run(cluster, T0 + timedelta(seconds=30), tmp_path)
    assert len(cluster.recorded) == 1
    state = json.loads((tmp_path / ".schedules" / "state.json").read_text())
    assert state["fired"] == {"namespace/shop#0": "2026-12-03T07:00:00+00:00"}
    assert [r.name for r in Store(tmp_path).runs()] != []  # the state is not a run


def test_a_missed_run_is_skipped_not_run_late(tmp_path: Path) -> None:
    cluster = FakeCluster('{"cron": "0 * * * *"}', [pod("web-1", {})])
    run(cluster, T0 - timedelta(minutes=30), tmp_path)
    run(cluster, T0 + timedelta(minutes=20), tmp_path)  # the controller was away at 07:00
    assert cluster.recorded == []
    run(cluster, T0 + timedelta(hours=1), tmp_path)
    assert len(cluster.recorded) == 1


def test_pod_schedule_profiles_that_pod(tmp_path: Path) -> None:
    pods = [pod("web-1", {}, annotation="cron: '@hourly'\ntechnique: bpftrace-profile"),
            pod("web-2", {})]
    cluster = FakeCluster(None, pods)
    run(cluster, T0 - timedelta(minutes=1), tmp_path)
    run(cluster, T0, tmp_path)
    assert cluster.recorded == [("shop", "web-1", "bpftrace-profile", 30)]
    assert Store(tmp_path).runs()[0].technique == "bpftrace-profile"


def test_bad_annotation_is_reported_once_and_others_still_run(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    pods = [pod("web-1", {}, annotation="{cron: '61 * * * *'}"),
            pod("web-2", {}, annotation="{cron: '@hourly'}")]
    cluster = FakeCluster(None, pods)
    with caplog.at_level(logging.WARNING, logger="webhook.schedules.runner"):
        run(cluster, T0 - timedelta(minutes=1), tmp_path)
        run(cluster, T0, tmp_path)
    bad = [r.getMessage() for r in caplog.records if "schedule ignored" in r.getMessage()]
    assert bad == ["schedule ignored: sidecar-debug.io/schedule on pod shop/web-1: cron: "
                   "minute: 61 is out of range 0-59"]
    assert cluster.recorded == [("shop", "web-2", "perf", 30)]


def test_a_failed_recording_is_logged_and_stores_nothing(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    cluster = FakeCluster('{"cron": "@hourly", "maxPods": 2}',
                          [pod("web-1", {}), pod("web-2", {})], fail={"web-1"})
    with caplog.at_level(logging.ERROR, logger="webhook.schedules.runner"):
        run(cluster, T0 - timedelta(minutes=1), tmp_path)
        run(cluster, T0, tmp_path)
    assert [r.pod for r in Store(tmp_path).runs()] == ["web-2"]
    assert "shop/web-1: flamegraph exited 4: perf is not permitted here" in caplog.text
    assert not list((tmp_path / ".schedules" / "incoming").iterdir())


def test_retention_from_the_environment(tmp_path: Path) -> None:
    store = Store(tmp_path)
    for days in (40, 3, 2, 1):
        store.save("shop", "web-1", "perf", {("a",): 1}, started=T0 - timedelta(days=days))
    run(FakeCluster(None, []), T0, tmp_path,
        environ={constants.ENV_RESULTS_KEEP: "2", constants.ENV_RESULTS_MAX_AGE: "30d"})
    assert [r.started.day for r in store.runs()] == [2, 1]


def test_a_recording_still_running_is_not_started_twice(tmp_path: Path) -> None:
    import threading

    release = threading.Event()
    cluster = FakeCluster('{"cron": "* * * * *"}', [pod("web-1", {})])
    original = cluster.profile

    def slow(*args: Any) -> Profile:
        release.wait(10)
        return original(*args)

    cluster.profile = slow  # type: ignore[method-assign]
    first = runner.Runner()
    first.tick(cluster, T0, tmp_path, environ={})  # first seen in its minute: runs
    first.tick(cluster, T0 + timedelta(minutes=1), tmp_path, environ={})  # still recording
    release.set()
    assert first.executor is not None
    first.executor.shutdown(wait=True)
    assert len(cluster.recorded) == 1


# --- ApiCluster over a fake session ---------------------------------------------------------------

@dataclass
class FakeSession:
    remote: dict[str, bytes]
    commands: list[list[str]] = field(default_factory=list)
    returncode: int = 0
    stdout: str = ""

    def toolset_container(self) -> str:
        return "debug-toolset"

    def exec(self, command: list[str], *, container: str | None = None,
             timeout: float = 0) -> Any:
        from webhook.sessions.session import ExecResult

        self.commands.append(command)
        return ExecResult(self.returncode, self.stdout, "recording\nerror: perf is not "
                          "permitted here\n" if self.returncode else "")

    def fetch(self, remote_dir: str, destinations: dict[str, Path], *, read: list[str],
              container: str | None = None) -> dict[str, bytes]:
        for name, path in destinations.items():
            path.write_bytes(self.remote[name])
        return {name: self.remote[name] for name in read}

    def remove_remote(self, remote_dir: str, container: str | None = None) -> None:
        self.commands.append(["rm", "-rf", remote_dir])


def test_api_cluster_runs_flamegraph_and_brings_the_stacks_back(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    session = FakeSession({"stacks.folded": b"node;main;fib 70\nnode;gc 5\n",
                           "summary.txt": b"fib 93 %\n"})
    cluster = ApiCluster(api_client=None)
    monkeypatch.setattr(cluster, "_session", lambda *args: session)
    [schedule] = parse('{"cron": "@hourly", "duration": 15, "frequency": 49}',
                       namespace="shop")
    profile = cluster.profile("shop", "web-1", schedule, tmp_path)
    assert profile.stacks == {("node", "main", "fib"): 70, ("node", "gc"): 5}
    command = session.commands[0]
    assert command[:5] == ["flamegraph", "--seconds", "15", "--frequency", "49"]
    assert command[5] == "--out" and command[6].startswith("/tmp/sidecar-debug/session-schedule")
    assert session.commands[1] == ["rm", "-rf", command[6]]
    session.returncode = 4
    with pytest.raises(ProfileError, match="flamegraph exited 4: error: perf is not permitted"):
        cluster.profile("shop", "web-1", schedule, tmp_path)


BPFTRACE_OUTPUT = """\
@[
    __x64_sys_write+5
    do_syscall_64+56
,{sp}
    0x7f00deadbeef
    fib+20
    main+40
, node]: 7
@[,{sp}
    fib+20
    main+40
, node]: 30
@[,{sp}
    0x7fc5da4cf5c7
, node]: 2
@cpu[3]: 9
""".format(sp=" ")  # bpftrace ends the separator line with a space


def test_api_cluster_bpftrace_profile_is_collapsed(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    session = FakeSession({}, stdout=BPFTRACE_OUTPUT)
    cluster = ApiCluster(api_client=None)
    monkeypatch.setattr(cluster, "_session", lambda *args: session)
    [schedule] = parse('{"cron": "@hourly", "technique": "bpftrace-profile", "duration": 5}',
                       namespace="shop")
    profile = cluster.profile("shop", "web-1", schedule, tmp_path)
    assert profile.stacks == {
        ("node", "main", "fib", "0x7f00deadbeef", "do_syscall_64_[k]", "__x64_sys_write_[k]"): 7,
        ("node", "main", "fib"): 30,
        ("node", "0x7fc5da4cf5c7"): 2,  # an empty kernel stack prints as `@[, `
    }
    script = session.commands[0][2]
    assert "profile:hz:99" in script and "interval:s:5" in script
    assert "ns.inum == $NS" in script
    assert folded.parse(folded.format_stacks(profile.stacks)) == profile.stacks


@pytest.mark.parametrize("environ,expected", [
    ({}, (runner.DEFAULT_KEEP, runner.DEFAULT_MAX_AGE)),
    ({constants.ENV_RESULTS_KEEP: "5", constants.ENV_RESULTS_MAX_AGE: "12h"},
     (5, timedelta(hours=12))),
    ({constants.ENV_RESULTS_KEEP: "0", constants.ENV_RESULTS_MAX_AGE: ""}, (None, None)),
    ({constants.ENV_RESULTS_KEEP: "many", constants.ENV_RESULTS_MAX_AGE: "soon"},
     (runner.DEFAULT_KEEP, runner.DEFAULT_MAX_AGE)),
])
def test_retention_settings(environ: dict[str, str], expected: tuple[Any, Any]) -> None:
    assert runner.retention(environ) == expected


def test_leadership_back_and_forth_does_not_repeat_a_run(tmp_path: Path) -> None:
    cluster = FakeCluster('{"cron": "*/10 * * * *"}', [pod("web-1", {})])
    first, second = runner.Runner(), runner.Runner()
    first.tick(cluster, T0 - timedelta(minutes=1), tmp_path, background=False, environ={})
    second.tick(cluster, T0, tmp_path, background=False, environ={})  # B leads at 07:00
    first.tick(cluster, T0 + timedelta(minutes=1), tmp_path, background=False, environ={})
    assert len(cluster.recorded) == 1  # A reads what B fired, instead of its own memory
