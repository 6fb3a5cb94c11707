"""The real server for the server tests: `sidecar-debug serve` (gunicorn with the project's
config and worker) over TLS on loopback, its output captured in a file."""

from __future__ import annotations

import contextlib
import os
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from tests.cluster.cluster import free_port

CLI = [sys.executable, "-m", "webhook.commands.cli"]


@dataclass
class Served:
    url: str
    port: int
    context: ssl.SSLContext
    log: Path
    process: subprocess.Popen[bytes]

    def output(self) -> str:
        return self.log.read_text(errors="replace")


def make_certs(directory: Path) -> Path:
    """A CA and a serving certificate from the product's own `certs generate`."""
    subprocess.run(
        [*CLI, "certs", "generate", "--service", "localhost", "--namespace", "test",
         "--out", str(directory)],
        check=True, capture_output=True,
    )  # fmt: skip
    return directory


def stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM, as Kubernetes stops the pod: gunicorn stops its workers gracefully."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


@contextlib.contextmanager
def serve(directory: Path, env: Mapping[str, str] | None = None) -> Iterator[Served]:
    """Start the server with `env` added to the environment; yield once /healthz answers."""
    certs = make_certs(directory / "certs")
    port = free_port()
    log = directory / f"serve-{port}.log"
    environment = {k: v for k, v in os.environ.items() if not k.startswith("SIDECAR_DEBUG_")}
    environment.update(env or {})
    with log.open("wb") as out:
        process = subprocess.Popen(  # noqa: S603 - our own CLI
            [*CLI, "serve", "--tls-cert-file", str(certs / "tls.crt"),
             "--tls-key-file", str(certs / "tls.key"), "--port", str(port),
             "--bind-address", "127.0.0.1"],
            stdout=out, stderr=subprocess.STDOUT, env=environment,
        )  # fmt: skip
    context = ssl.create_default_context(cafile=str(certs / "ca.crt"))
    context.check_hostname = False  # the certificate names the Service, we dial 127.0.0.1
    served = Served(f"https://127.0.0.1:{port}", port, context, log, process)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(served.url + "/healthz", context=context, timeout=2)  # noqa: S310
                break
            except (urllib.error.URLError, ConnectionError, OSError):
                if process.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(served.output()) from None
                time.sleep(0.3)
        yield served
    finally:
        stop(process)


def post(served: Served, path: str, body: bytes, content_type: str = "application/json",
         timeout: float = 30) -> tuple[int, bytes]:
    request = urllib.request.Request(  # noqa: S310 - https to our own test server
        served.url + path, data=body, method="POST", headers={"Content-Type": content_type})
    try:
        with urllib.request.urlopen(request, context=served.context, timeout=timeout) as reply:  # noqa: S310
            return int(reply.status), reply.read()
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read()
