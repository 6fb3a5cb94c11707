"""`sidecar-debug results serve` runs the page under gunicorn with the webhook's worker: pages
are answered, a client that never finishes its request head is dropped at the deadline, and the
kubelet's probes are not logged."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster.cluster import free_port


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[int, Path]]:
    port = free_port()
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "webhook.commands.cli", "results", "serve",
             "--dir", str(tmp_path), "--host", "127.0.0.1", "--port", str(port)],
            stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                if time.monotonic() > deadline or process.poll() is not None:
                    pytest.fail(f"results serve did not start: {log.read_text()}")
                time.sleep(0.1)
        yield port, log
    finally:
        process.terminate()
        process.wait(timeout=20)


def test_a_silent_client_is_dropped_and_pages_are_still_served(served: tuple[int, Path]) -> None:
    port, log = served
    idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(8)]  # > threads (4)
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as page:
        assert page.status == 200
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as probe:
        assert probe.status == 200
    idle[0].settimeout(15)
    started = time.monotonic()
    assert idle[0].recv(1) == b""  # closed by the server, not by us
    assert time.monotonic() - started < 12
    for conn in idle:
        conn.close()
    text = log.read_text()
    assert 'GET / HTTP/1.1\\" 200' in text  # the access line, inside a JSON string
    assert "/healthz" not in text
    assert "Traceback" not in text
