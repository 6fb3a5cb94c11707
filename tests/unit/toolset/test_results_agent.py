"""The toolset's results agent and entrypoint, the parts that read what others wrote: a plan
from the service is data (only the two techniques, whole numbers in range, a ticket), the
configuration from the env must be an https URL with a CA and a token, and the session's
deadline is read from the env or ignored when malformed."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

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
