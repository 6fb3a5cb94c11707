"""The toolset's results agent and entrypoint, the parts that read what others wrote: a plan
from the service is data (only the two techniques, whole numbers in range, a ticket), the
configuration from the env must be an https URL with a CA and a token, and the session's
deadline is read from the env or ignored when malformed."""

from __future__ import annotations

import os
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.unit.toolset.conftest import load_script
from webhook.certs import pki


@pytest.fixture(scope="module")
def agent(common: ModuleType) -> ModuleType:
    return load_script("results-agent")


def test_only_runnable_plan_items_are_taken(agent: ModuleType) -> None:
    good = {"ticket": "t1", "technique": "perf", "seconds": 5, "frequency": 99}
    answer = {"runs": [
        good,
        {**good, "technique": "rm -rf /"},
        {**good, "seconds": 10**9},
        {**good, "seconds": True},
        {**good, "frequency": "99"},
        {**good, "ticket": 7},
        "not an object",
    ]}
    assert agent._plan_items(answer) == [good]
    assert agent._plan_items({"runs": "nope"}) == [] and agent._plan_items([]) == []


def test_configuration_needs_https_a_ca_and_the_token(
        agent: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    token = tmp_path / "token"
    token.write_text("abc")
    ca = pki.generate_ca().cert_pem.decode()
    monkeypatch.setenv(agent.TOKEN_ENV, str(token))
    for url, pem in (("", ca), ("http://results:80", ca), ("https://r.sd.svc:443", ""),
                     ("https://r.sd.svc:443", "not a certificate")):
        monkeypatch.setenv(agent.URL_ENV, url)
        monkeypatch.setenv(agent.CA_ENV, pem)
        assert agent.configured() is None, (url, pem[:10])
    monkeypatch.setenv(agent.URL_ENV, "https://r.sd.svc:443")
    monkeypatch.setenv(agent.CA_ENV, ca)
    client = agent.configured()
    assert client is not None and client.url == "https://r.sd.svc:443"
    assert client._token() == "abc"


@pytest.mark.parametrize(("value", "expected"), [
    ("2026-12-03T07:00:00Z", 1796281200.0),
    ("2026-12-03T07:00:00+00:00", 1796281200.0),
    ("", None), ("soon", None), ("2026-13-45T99:00:00Z", None),
])
def test_the_session_deadline_from_the_env(entrypoint: ModuleType, value: str,
                                           expected: float | None,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(entrypoint.DEADLINE_ENV, value)
    assert entrypoint.session_deadline() == expected


def test_the_recordings_files_are_read_capped_and_without_following_links(
        agent: ModuleType, tmp_path: Path) -> None:
    stacks = tmp_path / "stacks.folded"
    stacks.write_text("main;fib 3\n")
    assert agent._read_capped(str(stacks), 1024) == "main;fib 3\n"
    with pytest.raises(agent.RecordingError, match="larger than 4 bytes"):
        agent._read_capped(str(stacks), 4)
    (tmp_path / "link").symlink_to(stacks)
    with pytest.raises(OSError):
        agent._read_capped(str(tmp_path / "link"), 1024)


def _fake_flamegraph(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, exit_code: int,
                     meta: str | None) -> None:
    """A `flamegraph` on PATH that fails as the real one does: OUT/meta.json (when `meta` is
    given) and a last line on stderr."""
    script = tmp_path / "bin" / "flamegraph"
    script.parent.mkdir()
    write = "" if meta is None else f"cat > \"$out/meta.json\" <<'META'\n{meta}\nMETA\n"
    script.write_text("#!/bin/sh\n"
                      'while [ $# -gt 0 ]; do [ "$1" = --out ] && out=$2; shift; done\n'
                      'mkdir -p "$out"\n' + write +
                      f"echo 'error: the last line' >&2\nexit {exit_code}\n")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{script.parent}:{os.environ['PATH']}")


@pytest.mark.parametrize(("exit_code", "meta", "reason"), [
    # flamegraph's own code names the real cause: the page and the Event say `memlock`, and
    # three failures for a missing capability are not counted with three for a paranoid level.
    (4, '{"error": {"reason": "memlock", "code": 4, "message": "m"}}', "memlock"),
    (4, '{"error": {"reason": "ptrace", "code": 4, "message": "m"}}', "ptrace"),
    (1, '{"error": {"reason": "no-samples", "code": 1, "message": "m"}}', "no-samples"),
    # What the file says is not believed beyond the known codes (the metric's labels).
    (4, '{"error": {"reason": "x<script>", "code": 4}}', "not-possible"),
    (4, '{"error": {"reason": "made-up", "code": 4}}', "not-possible"),
    (4, '{"error": "memlock"}', "not-possible"),
    (4, "[1, 2]", "not-possible"),
    (4, "not json", "not-possible"),
    (3, None, "no-target"),
    (9, None, "exit-9"),
])
def test_a_failed_flamegraph_is_reported_with_its_own_reason(
        agent: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, exit_code: int,
        meta: str | None, reason: str) -> None:
    _fake_flamegraph(tmp_path, monkeypatch, exit_code, meta)
    with pytest.raises(agent.RecordingError) as failed:
        agent.record("perf", 1, 99)
    assert failed.value.reason == reason
    assert failed.value.message == f"flamegraph exited {exit_code}: error: the last line"


def test_a_meta_file_that_is_a_link_is_not_followed(agent: ModuleType, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text('{"error": {"reason": "memlock"}}')
    out = tmp_path / "out"
    out.mkdir()
    (out / "meta.json").symlink_to(elsewhere)
    assert agent.failure_reason(4, str(out)) == "not-possible"
    (out / "meta.json").unlink()
    (out / "meta.json").write_text('{"error": {"reason": "memlock"}}')
    assert agent.failure_reason(4, str(out)) == "memlock"


def test_a_failed_recording_is_reported_to_the_failures_endpoint(
        agent: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    """The tool's last line carries the app's text: the report is one printable line, capped,
    with the reason as a short code (the service checks both again)."""
    calls: list[tuple[str, str, object]] = []

    class Client:
        url = "https://r"

        def call(self, method: str, path: str, body: object = None) -> tuple[int, object]:
            calls.append((method, path, body))
            return 200, {"recorded": "failure"}

    def record(technique: str, seconds: int, frequency: int) -> None:
        raise agent.RecordingError("not-possible", "flamegraph exited 4: perf\nmay not\x1b[2J "
                                   + "x" * 1000)

    monkeypatch.setattr(agent, "record", record)
    agent.Agent(Client(), 20.0).run_item({"ticket": "t1", "technique": "perf", "seconds": 5,
                                          "frequency": 99, "schedule": "pod/shop/web#0"})
    [(method, path, body)] = calls
    assert (method, path) == ("POST", "/agent/v1/failures")
    assert isinstance(body, dict) and set(body) == {"ticket", "reason", "message"}
    assert (body["ticket"], body["reason"]) == ("t1", "not-possible")
    message = body["message"]
    assert message.startswith("flamegraph exited 4: perf may not\\x1b[2J xxx")
    assert message.isprintable() and len(message) == agent.MAX_MESSAGE


# --- the agent's connection to the service: kept alive, verified, re-opened -------------------

class _Service:
    """A TLS HTTP/1.1 server on loopback that answers every request with a small JSON plan and
    records which connection each request came on; `close_idle()` closes every connection it
    holds between requests, as the service does when its keep-alive timeout passes."""

    def __init__(self, tmp_path: Path, ca: pki.KeyPair, names: tuple[str, ...]) -> None:
        import socket
        import ssl
        import threading

        serving = pki.generate_serving(ca, list(names))
        (tmp_path / "tls.crt").write_bytes(serving.cert_pem)
        (tmp_path / "tls.key").write_bytes(serving.key_pem)
        self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.context.load_cert_chain(tmp_path / "tls.crt", tmp_path / "tls.key")
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.lock = threading.Lock()
        self.open: list[Any] = []
        self.requests: list[tuple[int, str, str]] = []  # (connection number, method, path)
        self.accepted = 0
        self.threading = threading
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                raw, _ = self.listener.accept()
            except OSError:
                return
            self.accepted += 1
            self.threading.Thread(target=self._serve, args=(raw, self.accepted),
                                  daemon=True).start()

    def _serve(self, raw: Any, number: int) -> None:
        try:
            conn = self.context.wrap_socket(raw, server_side=True)
        except OSError:
            raw.close()
            return
        with self.lock:
            self.open.append(conn)
        reader = conn.makefile("rb")
        try:
            while True:
                line = reader.readline()
                if not line:
                    return
                method, path, _ = line.decode().split(" ", 2)
                length = 0
                while (header := reader.readline()) not in (b"\r\n", b""):
                    name, _, value = header.decode().partition(":")
                    if name.lower() == "content-length":
                        length = int(value)
                reader.read(length)
                with self.lock:
                    self.requests.append((number, method, path))
                body = b'{"runs": [], "pollSeconds": 60}'
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                             b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        except (OSError, ValueError):
            return
        finally:
            reader.close()
            conn.close()

    def close_idle(self) -> None:
        import socket

        with self.lock:
            for conn in self.open:
                try:
                    conn.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            self.open.clear()

    def stop(self) -> None:
        import socket

        try:
            self.listener.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread (Linux)
        except OSError:
            pass
        self.listener.close()
        self.close_idle()


@pytest.fixture
def ca() -> pki.KeyPair:
    return pki.generate_ca()


def _client(agent: ModuleType, tmp_path: Path, url: str, ca_pem: str) -> Any:
    token = tmp_path / "token"
    token.write_text("tok-1")
    return agent.Client(url, ca_pem, str(token), "ns/pod")


def test_polls_reuse_one_connection(agent: ModuleType, tmp_path: Path,
                                    ca: pki.KeyPair) -> None:
    service = _Service(tmp_path, ca, ("localhost",))
    try:
        client = _client(agent, tmp_path, f"https://localhost:{service.port}/base/",
                         ca.cert_pem.decode())
        for _ in range(3):
            assert client.call("GET", "/agent/v1/plan") == (200, {"runs": [],
                                                                   "pollSeconds": 60})
        assert client.call("POST", "/agent/v1/runs", {"ticket": "t"})[0] == 200
        # One TLS handshake for all four calls, each on the same connection, the URL's path
        # kept in front of the API's.
        assert service.accepted == 1 and client.connections == 1
        assert [r for r in service.requests] == [(1, "GET", "/base/agent/v1/plan")] * 3 + [
            (1, "POST", "/base/agent/v1/runs")]
    finally:
        service.stop()


def test_a_connection_the_service_closed_is_opened_again(agent: ModuleType, tmp_path: Path,
                                                         ca: pki.KeyPair) -> None:
    import time

    service = _Service(tmp_path, ca, ("localhost",))
    try:
        client = _client(agent, tmp_path, f"https://localhost:{service.port}",
                         ca.cert_pem.decode())
        assert client.call("GET", "/agent/v1/plan")[0] == 200
        service.close_idle()  # the keep-alive timeout passed while the agent waited
        time.sleep(0.2)
        # The next poll and the push after it are answered, each once: the request sent on
        # the dead connection is sent again on a new one, never lost nor doubled.
        assert client.call("GET", "/agent/v1/plan")[0] == 200
        assert client.call("POST", "/agent/v1/runs", {"ticket": "t"})[0] == 200
        assert service.accepted == 2 and client.connections == 2
        assert service.requests == [(1, "GET", "/agent/v1/plan"), (2, "GET", "/agent/v1/plan"),
                                    (2, "POST", "/agent/v1/runs")]
    finally:
        service.stop()


def test_a_service_that_is_gone_is_an_error_not_a_loop(agent: ModuleType, tmp_path: Path,
                                                       ca: pki.KeyPair) -> None:
    service = _Service(tmp_path, ca, ("localhost",))
    client = _client(agent, tmp_path, f"https://localhost:{service.port}", ca.cert_pem.decode())
    assert client.call("GET", "/agent/v1/plan")[0] == 200
    service.stop()
    with pytest.raises(OSError):
        client.call("GET", "/agent/v1/plan")
    assert client.connection is None and client.connections == 2  # one new try, not more


@pytest.mark.parametrize("case", ["other CA", "other name"])
def test_the_service_certificate_is_verified_on_every_connection(
        agent: ModuleType, tmp_path: Path, ca: pki.KeyPair, case: str) -> None:
    import ssl

    # The first connection is to the real service; after it closes, the same address
    # answers with a certificate the agent must refuse: another CA's, or one for another name.
    service = _Service(tmp_path, ca, ("localhost",))
    client = _client(agent, tmp_path, f"https://localhost:{service.port}", ca.cert_pem.decode())
    try:
        assert client.call("GET", "/agent/v1/plan")[0] == 200
        impostor = pki.generate_ca() if case == "other CA" else ca
        names = ("localhost",) if case == "other CA" else ("results.elsewhere.svc",)
        serving = pki.generate_serving(impostor, list(names))
        (tmp_path / "tls.crt").write_bytes(serving.cert_pem)
        (tmp_path / "tls.key").write_bytes(serving.key_pem)
        service.context.load_cert_chain(tmp_path / "tls.crt", tmp_path / "tls.key")
        service.close_idle()
        with pytest.raises(ssl.SSLCertVerificationError):
            client.call("GET", "/agent/v1/plan")
        assert service.requests == [(1, "GET", "/agent/v1/plan")]  # nothing sent to it
        assert client.connection is None
    finally:
        service.stop()


@pytest.mark.parametrize(("wait", "closed"), [(60.0, True), (20.0, False), (5.0, False)])
def test_the_connection_is_closed_before_a_long_wait_only(agent: ModuleType, wait: float,
                                                          closed: bool) -> None:
    # A pod with nothing due asks once a minute: the service should not hold an idle TLS
    # connection for it meanwhile; a pod that asks again soon keeps its connection.
    class Recorder:
        url = "https://results"
        closes = 0

        def close(self) -> None:
            self.closes += 1

    client = Recorder()
    subject = agent.Agent(client, 20.0)

    def once() -> float:
        subject.stop.set()
        return wait

    subject.once = once
    assert subject.run() == 0
    assert client.closes == (1 if closed else 0)
