"""Slow clients cannot stop the webhook (issue 12, item 6). Before, 8 connections that sent
nothing (or a header byte now and then) held all 2 x 4 threads and no review was answered:
the handshake and the request reads had no deadline.

The real server (`sidecar-debug serve`: gunicorn, the project's config and worker, TLS), 64 slow
clients of four kinds (bench/slowloris.py: silent, TLS then nothing, a head or a body one byte at
a time), then a normal review: it is answered within the webhook timeout the apiserver applies,
and every slow connection is closed by the server once its deadline (set to 2 s here) passed."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest

from bench.slowloris import KINDS, SlowClients
from tests.unit.core_helpers import admission_review
from tests.unit.server.serving import Served, post, serve

DEADLINE_S = 2.0
WEBHOOK_TIMEOUT_S = 10.0  # the apiserver's default timeoutSeconds for a webhook call
SLOW_CLIENTS = 64
POD = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "app", "image": "busybox"}]}}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    env = {
        "SIDECAR_DEBUG_WORKERS": "2",
        "SIDECAR_DEBUG_THREADS": "4",
        "SIDECAR_DEBUG_TLS_HANDSHAKE_TIMEOUT_SECONDS": str(DEADLINE_S),
        "SIDECAR_DEBUG_REQUEST_HEADER_TIMEOUT_SECONDS": str(DEADLINE_S),
        "SIDECAR_DEBUG_REQUEST_BODY_TIMEOUT_SECONDS": str(DEADLINE_S),
    }
    with serve(tmp_path_factory.mktemp("slow"), env) as server:
        yield server


def _review_seconds(served: Served) -> float:
    started = time.monotonic()
    status, body = post(served, "/mutate", json.dumps(admission_review(POD)).encode(),
                        timeout=WEBHOOK_TIMEOUT_S)
    elapsed = time.monotonic() - started
    assert status == 200 and json.loads(body)["response"]["allowed"] is True
    return elapsed


def test_reviews_are_answered_while_64_slow_clients_hold_connections(served: Served) -> None:
    with SlowClients("127.0.0.1", served.port, SLOW_CLIENTS, reopen=False) as slow:
        slow.wait_all_open()
        assert len(slow.open_conns) == SLOW_CLIENTS
        for _ in range(3):
            assert _review_seconds(served) < WEBHOOK_TIMEOUT_S
        assert slow.wait_all_closed(DEADLINE_S + 5), (
            f"{len(slow.open_conns)} slow connections still open: "
            f"{sorted({c.kind for c in slow.open_conns})}")
    assert sorted({c.kind for c in slow.closed}) == sorted(KINDS)
    lifetimes = [c.lifetime_s for c in slow.closed]
    # Closed by the server's deadline: not before it, and soon after it.
    assert min(lifetimes) >= DEADLINE_S - 0.3, slow.closed
    assert max(lifetimes) <= DEADLINE_S + 3, slow.closed
    assert "Traceback" not in served.output()


def test_a_client_that_keeps_reconnecting_does_not_stop_reviews(served: Served) -> None:
    """64 slow connections at all times (each one the server closes is replaced at once)."""
    with SlowClients("127.0.0.1", served.port, SLOW_CLIENTS, reopen=True) as slow:
        slow.wait_all_open()
        until = time.monotonic() + 2 * DEADLINE_S + 1  # across at least two rounds of closing
        reviews = []
        while time.monotonic() < until:
            reviews.append(_review_seconds(served))
        assert len(slow.closed) >= SLOW_CLIENTS
    assert max(reviews) < WEBHOOK_TIMEOUT_S

