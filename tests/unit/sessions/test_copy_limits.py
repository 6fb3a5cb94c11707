"""What a pod sends back is capped (issue 17): exec output kept in memory, the copy-back archive
(spooled, never all in memory) and the files it unpacks to; sparse members are refused."""

from __future__ import annotations

import base64
import io
import shutil
import subprocess
import tarfile
import tracemalloc
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.unit.sessions.test_sessions import BatchedStream, FakeSession, tar_of
from webhook.sessions import copyback
from webhook.sessions import session as sessions

MiB = 1024 * 1024


def _gnu_tar(tmp_path: Path, *options: str) -> bytes:
    """A real tar's archive of a 512 MiB file that is all hole: a few KiB on the wire."""
    source = tmp_path / "src"
    source.mkdir()
    with open(source / "flamegraph.html", "wb") as hole:
        hole.truncate(512 * MiB)
    return subprocess.run(
        ["tar", "--sparse", *options, "-C", str(source), "-cf", "-", "flamegraph.html"],
        check=True, capture_output=True).stdout


@pytest.mark.skipif(shutil.which("tar") is None, reason="needs GNU tar")
@pytest.mark.parametrize("options", [(), ("--format=posix",)], ids=["gnu", "pax"])
def test_a_sparse_member_is_refused_before_it_expands(
        tmp_path: Path, options: Sequence[str]) -> None:
    archive = _gnu_tar(tmp_path, *options)
    assert len(archive) <= 12 * 1024  # the attack: ~10 KiB
    out = tmp_path / "out"
    with pytest.raises(sessions.SessionError) as raised:
        FakeSession(archive).fetch("/tmp/sidecar-debug/x", {"flamegraph.html": out / "f.html"},
                                   force=True)
    assert "sparse file" in str(raised.value) and "nothing was written" in str(raised.value)
    assert list(out.iterdir()) == []


def test_members_larger_than_the_limit_are_refused(tmp_path: Path) -> None:
    session = FakeSession(tar_of({"trace.txt": b"x" * 5000, "trace/metadata": b"ctf"}))
    session.max_copy_bytes = 4096
    with pytest.raises(sessions.SessionError) as raised:
        session.fetch("/tmp/sidecar-debug/x",
                      {"trace.txt": tmp_path / "trace.txt", "trace": tmp_path / "trace"})
    assert "4096-byte limit (--max-copy-bytes)" in str(raised.value)
    assert not (tmp_path / "trace.txt").exists()


def test_the_archive_stream_stops_at_the_limit() -> None:
    received = copyback.Base64Archive(max_bytes=MiB)
    chunk = base64.b64encode(b"\0" * 48 * 1024).decode()
    fed = 0
    with pytest.raises(copyback.CopyError) as raised:
        for _ in range(64 * MiB // (48 * 1024)):
            received.feed(chunk)
            fed += 48 * 1024
    received.close()
    assert fed <= MiB  # refused at the limit, not after the whole stream
    assert "1048576-byte limit" in str(raised.value)


def test_a_64_mib_copy_back_does_not_live_in_memory(tmp_path: Path) -> None:
    payload = tar_of({"flamegraph.html": b"\0" * (64 * MiB)})
    text = base64.b64encode(payload).decode()
    del payload

    class Streaming(FakeSession):
        def exec(self, command: Sequence[str], *, on_stdout: Any = None, **_: Any
                 ) -> sessions.ExecResult:
            for start in range(0, len(text), 64 * 1024):
                on_stdout(text[start:start + 64 * 1024])
            return sessions.ExecResult(0, "", "")

    tracemalloc.start()
    try:
        Streaming(b"").fetch("/tmp/sidecar-debug/x", {"flamegraph.html": tmp_path / "f.html"})
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert (tmp_path / "f.html").stat().st_size == 64 * MiB
    assert peak < 16 * MiB, f"peak {peak / MiB:.1f} MiB"


def test_exec_output_beyond_the_cap_stops_the_command(monkeypatch: pytest.MonkeyPatch) -> None:
    import kubernetes.stream

    batches: list[list[Any]] = [[(1, "x" * MiB)] for _ in range(24)] + [["close"]]
    stream = BatchedStream(batches)
    monkeypatch.setattr(kubernetes.stream, "stream", lambda *a, **k: stream)
    session = sessions.Session(api_client=None, pod="web", namespace="ns", container="tools",
                               max_output_bytes=4 * MiB)
    with pytest.raises(sessions.SessionError) as raised:
        session.exec(["doctor"], container="tools")
    assert "more than 4194304 bytes of output" in str(raised.value)
    assert "--max-output-bytes" in str(raised.value)
    assert not stream.open and len(stream.batches) >= 18  # closed early, the rest never read


def test_streamed_stdout_is_not_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    import kubernetes.stream

    batches: list[list[Any]] = [[(1, "x" * MiB)] for _ in range(8)] + [["close"]]
    monkeypatch.setattr(kubernetes.stream, "stream", lambda *a, **k: BatchedStream(batches))
    seen: list[int] = []
    session = sessions.Session(api_client=None, pod="web", namespace="ns", container="tools",
                               max_output_bytes=MiB)
    result = session.exec(["uprobe-trace"], container="tools", keep_stdout=False,
                           on_stdout=lambda chunk: seen.append(len(chunk)))
    assert sum(seen) == 8 * MiB and result.stdout == ""


def test_extract_reads_from_a_file(tmp_path: Path) -> None:
    arrived = copyback.extract(io.BytesIO(tar_of({"a": b"1"})), ["a"], tmp_path)
    assert arrived["a"].read_bytes() == b"1"


def test_tarfile_would_expand_the_sparse_member(tmp_path: Path) -> None:
    """Why the refusal matters: the same archive, extracted by tarfile, is a 512 MiB file."""
    if shutil.which("tar") is None:
        pytest.skip("needs GNU tar")
    with tarfile.open(fileobj=io.BytesIO(_gnu_tar(tmp_path)), mode="r:") as tar:
        member = tar.getmembers()[0]
    assert member.issparse() and member.size == 512 * MiB


def test_the_caps_are_flags_of_every_session_command(monkeypatch: pytest.MonkeyPatch) -> None:
    from webhook.commands import cli

    made: list[sessions.Session] = []

    def doctor(session: sessions.Session, **_: Any) -> int:
        made.append(session)
        return 0

    monkeypatch.setattr(sessions, "api_client_from", lambda *a: None)
    monkeypatch.setattr(sessions, "doctor", doctor)
    assert cli.main(["doctor", "web", "-n", "ns", "--max-output-bytes", "1000",
                     "--max-copy-bytes", "2000"]) == 0
    assert (made[0].max_output_bytes, made[0].max_copy_bytes) == (1000, 2000)
    with pytest.raises(SystemExit) as raised:
        cli.build_parser().parse_args(["flamegraph", "web", "--max-copy-bytes", "0"])
    assert raised.value.code == 2
