"""Session commands without a cluster: container discovery, ephemeral container bodies, and the
tar-over-exec copy (with a fake exec)."""

from __future__ import annotations

import base64
import io
import json
import tarfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from webhook.commands import cli
from webhook.sessions import session as sessions


def pod(containers: Sequence[str], *, status: dict[str, Any] | None = None,
        ephemeral: Sequence[str] = (), running: Sequence[str] = ()) -> dict[str, Any]:
    annotations = {"sidecar-debug.io/status": json.dumps(status)} if status else {}
    return {
        "metadata": {"name": "web", "annotations": annotations},
        "spec": {"containers": [{"name": n} for n in containers],
                 "ephemeralContainers": [{"name": n} for n in ephemeral]},
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


def test_newest_running_attached_container() -> None:
    manifest = pod(["app"], ephemeral=["debug-toolset-aaaaaa", "debug-toolset-bbbbbb", "other"],
                   running=["debug-toolset-aaaaaa", "debug-toolset-bbbbbb", "other"])
    assert sessions.find_toolset_container(manifest, None, "debug-toolset") == (
        "debug-toolset-bbbbbb")


def test_no_toolset_container_says_how_to_get_one() -> None:
    with pytest.raises(sessions.SessionError) as raised:
        sessions.find_toolset_container(pod(["app"]), None, "debug-toolset")
    assert raised.value.code == sessions.EXIT_NO_TOOLSET
    assert "attach" in str(raised.value)


def test_unknown_requested_container() -> None:
    with pytest.raises(sessions.SessionError) as raised:
        sessions.find_toolset_container(pod(["app"]), "nope", "debug-toolset")
    assert raised.value.code == sessions.EXIT_USAGE


def test_ephemeral_container_targets_the_app() -> None:
    body = sessions.ephemeral_container("debug-toolset-x", "img:1", "app", "IfNotPresent", None)
    assert body["targetContainerName"] == "app"
    assert body["command"] == ["toolset-entrypoint"]
    assert "securityContext" not in body  # forbidden on Kubernetes < 1.23
    privileged = sessions.ephemeral_container("n", "i", "app", "Always", {"privileged": True})
    assert privileged["securityContext"] == {"privileged": True}


class FakeSession(sessions.Session):
    def __init__(self, archive: bytes) -> None:
        super().__init__(api_client=None, pod="web", namespace="ns", container="tools")
        self.archive = archive
        self.commands: list[list[str]] = []

    def exec(self, command: Sequence[str], **_: Any) -> sessions.ExecResult:  # type: ignore[override]
        self.commands.append(list(command))
        return sessions.ExecResult(0, base64.b64encode(self.archive).decode(), "")


def tar_of(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def test_fetch_copies_files_back(tmp_path: Path) -> None:
    session = FakeSession(tar_of({"flamegraph.html": b"<html>", "trace/metadata": b"ctf"}))
    written = session.fetch("/tmp/sidecar-debug/x", ["flamegraph.html", "trace"], tmp_path)
    assert (tmp_path / "flamegraph.html").read_bytes() == b"<html>"
    assert (tmp_path / "trace" / "metadata").read_bytes() == b"ctf"
    assert len(written) == 2
    assert "tar -cf -" in session.commands[0][-1]


def test_fetch_refuses_paths_outside_the_target(tmp_path: Path) -> None:
    session = FakeSession(tar_of({"../evil": b"x"}))
    with pytest.raises(sessions.SessionError):
        session.fetch("/tmp/sidecar-debug/x", ["evil"], tmp_path / "out")
    assert not (tmp_path / "evil").exists()


def test_fetch_of_an_incomplete_archive_says_so(tmp_path: Path) -> None:
    whole = tar_of({"trace/metadata": b"ctf" * 4000})
    session = FakeSession(whole[: len(whole) // 2])
    with pytest.raises(sessions.SessionError) as raised:
        session.fetch("/tmp/sidecar-debug/lttng-1", ["trace"], tmp_path)
    assert "arrived incomplete" in str(raised.value)
    assert "/tmp/sidecar-debug/lttng-1" in str(raised.value)


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
