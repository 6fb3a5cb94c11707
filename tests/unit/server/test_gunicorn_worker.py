"""The served worker class spreads new connections over the workers (server/gunicorn_worker.py):
a worker whose threads are all busy leaves the next connection to an idle one. Real gunicorn,
two workers of one thread each, an app that takes 0.3 s and answers its pid."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.cluster.cluster import free_port

REPO = Path(__file__).resolve().parents[3]



def _pid_of_answer(port: int) -> int:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        answer = b""
        while chunk := conn.recv(4096):
            answer += chunk
    return int(answer.split(b"\r\n\r\n", 1)[1])


def _serve(worker_class: str) -> Iterator[int]:
    port = free_port()
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gunicorn",
            f"--worker-class={worker_class}",
            "--workers=2",
            "--threads=1",
            f"--bind=127.0.0.1:{port}",
            "tests.unit.server.slow_wsgi_app:app",
        ],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        pids: set[int] = set()
        deadline = time.monotonic() + 30
        while len(pids) < 2:  # both workers up and answering
            assert time.monotonic() < deadline, "gunicorn did not start two workers"
            try:
                with ThreadPoolExecutor(2) as pool:
                    pids |= set(pool.map(_pid_of_answer, [port, port]))
            except (OSError, ValueError, IndexError):
                time.sleep(0.2)
        yield port
    finally:
        server.terminate()
        server.wait(timeout=30)


@pytest.fixture(scope="module")
def balanced() -> Iterator[int]:
    yield from _serve("webhook.server.gunicorn_worker.BalancedThreadWorker")


def test_a_busy_worker_leaves_new_connections_to_an_idle_one(balanced: int) -> None:
    for _ in range(8):
        with ThreadPoolExecutor(2) as pool:
            first = pool.submit(_pid_of_answer, balanced)
            time.sleep(0.05)  # the first connection is accepted and busy
            second = pool.submit(_pid_of_answer, balanced)
            assert first.result() != second.result()


def test_the_served_configuration_uses_it() -> None:
    from webhook.server import gunicorn_conf

    assert gunicorn_conf.worker_class == "webhook.server.gunicorn_worker.BalancedThreadWorker"


def test_a_worker_loads_the_kubernetes_client_and_freezes_what_it_loaded() -> None:
    """Both happen when the worker loads the app, not during its first reviews."""
    probe = (
        "import gc, sys; import webhook.server.wsgi; "
        "print('kubernetes.client' in sys.modules, gc.get_freeze_count())"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        check=True,
    )
    loaded, frozen = result.stdout.split()
    assert loaded == "True"
    assert int(frozen) > 10_000
