"""Local stand-ins for Pyroscope and Parca: real HTTP servers in the test process that record
every request (method, path, query, headers, body) and answer from a script, so that the
exporters' requests, retries and timeouts are tested over real sockets. `go tool pprof -raw`
(golang-go, installed by scripts/setup.sh for the Kubernetes build) decodes pprof
independently of our encoder."""

from __future__ import annotations

import gzip
import os
import re
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TypeVar
from urllib.parse import parse_qs, urlsplit

T = TypeVar("T")


@dataclass
class Received:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]  # names lower-cased
    body: bytes


@dataclass
class Answer:
    """`status` with `body`; `delay` seconds of silence first; `close` hangs up instead."""

    status: int = 200
    body: bytes = b"{}"
    delay: float = 0.0
    close: bool = False
    headers: dict[str, str] = field(default_factory=dict)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False


class FakeSink:
    """Answers from `script` in order, then `then` for every later request."""

    def __init__(self, script: list[Answer] | None = None, then: Answer | None = None,
                 tls: ssl.SSLContext | None = None) -> None:
        self.script = list(script or [])
        self.then = then or Answer()
        self.received: list[Received] = []
        self.arrived = threading.Condition()
        self.release = threading.Event()  # set: a `delay` answer stops waiting
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(length)
                parts = urlsplit(self.path)
                with fake.arrived:
                    fake.received.append(Received(
                        self.command, parts.path, parse_qs(parts.query),
                        {k.lower(): v for k, v in self.headers.items()}, body))
                    answer = fake.script.pop(0) if fake.script else fake.then
                    fake.arrived.notify_all()
                if answer.delay:
                    fake.release.wait(answer.delay)
                if answer.close:
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                try:
                    self.send_response(answer.status)
                    for name, value in answer.headers.items():
                        self.send_header(name, value)
                    self.send_header("Content-Length", str(len(answer.body)))
                    self.end_headers()
                    self.wfile.write(answer.body)
                except OSError:
                    pass  # the client gave up (a timeout test)

            do_GET = do_POST  # noqa: N815 - what a client following a redirect may send

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = _Server(("127.0.0.1", 0), Handler)
        self.tls = tls
        if tls is not None:
            self.server.socket = tls.wrap_socket(self.server.socket, server_side=True)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        if self.tls is not None:
            return f"https://localhost:{port}"
        return f"http://{host!s}:{port}"

    def wait_for(self, count: int, timeout: float = 20.0) -> list[Received]:
        return wait_for_requests(self.arrived, self.received, count, timeout)


def wait_for_requests(arrived: threading.Condition, received: list[T], count: int,
                      timeout: float = 20.0) -> list[T]:
    """A copy of `received` once it holds `count` requests (appended under `arrived`)."""
    deadline = time.monotonic() + timeout
    with arrived:
        while len(received) < count:
            left = deadline - time.monotonic()
            assert left > 0, f"{len(received)} requests arrived, expected {count}"
            arrived.wait(left)
        return list(received)


@contextmanager
def running(sink: FakeSink) -> Iterator[FakeSink]:
    sink.thread.start()
    try:
        yield sink
    finally:
        sink.release.set()
        sink.server.shutdown()
        sink.server.server_close()


# --- go tool pprof -raw ---------------------------------------------------------------------------

_SAMPLE = re.compile(r"^\s*(\d+): ((?:\d+ )*)$")
_LOCATION = re.compile(r"^\s*(\d+): 0x[0-9a-f]+ (?:M=\d+ )?(.*) :0 s=0$")


@dataclass
class Decoded:
    stacks: dict[tuple[str, ...], int]
    header: dict[str, str]  # PeriodType, Period, Time, Duration as pprof prints them
    location_ids: list[int]
    sample_type: str


def go_pprof_raw(blob: bytes, tmp_path: Path) -> Decoded:
    """Folded stacks from `go tool pprof -raw`: samples (count: location ids, leaf first)
    joined with the Locations table's function names. -symbolize=none: pprof's driver would
    otherwise simplify names that look like C++ (`JS:~<anonymous>` shown as `JS:~`)."""
    path = tmp_path / f"profile-{time.monotonic_ns()}.pb.gz"
    path.write_bytes(blob if blob[:2] == b"\x1f\x8b" else gzip.compress(blob))
    result = subprocess.run(
        ["go", "tool", "pprof", "-raw", "-symbolize=none", str(path)], capture_output=True,
        timeout=120,
        env={"HOME": str(tmp_path), "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
             "GOCACHE": str(tmp_path / "gocache"), "PPROF_TMPDIR": str(tmp_path)})
    assert result.returncode == 0, result.stderr.decode(errors="replace")
    lines = result.stdout.decode("utf-8").splitlines()
    header: dict[str, str] = {}
    samples: list[tuple[int, list[int]]] = []
    names: dict[int, str] = {}
    section = "header"
    sample_type = ""
    for line in lines:
        if line in ("Samples:", "Locations", "Mappings"):
            section = line.rstrip(":")
            continue
        if section == "header" and ": " in line:
            key, _, value = line.partition(": ")
            header[key] = value
        elif section == "Samples":
            match = _SAMPLE.match(line)
            if match:
                samples.append((int(match.group(1)), [int(i) for i in match.group(2).split()]))
            elif line.strip():
                sample_type = line.strip()
        elif section == "Locations":
            match = _LOCATION.match(line)
            assert match, f"unexpected location line {line!r}"
            names[int(match.group(1))] = match.group(2)
    stacks: dict[tuple[str, ...], int] = {}
    for count, ids in samples:
        frames = tuple(names[i] for i in reversed(ids))
        stacks[frames] = stacks.get(frames, 0) + count
    return Decoded(stacks, header, list(names), sample_type)
