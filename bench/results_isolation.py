"""One namespace's hostile pushes against another's plans and pages (issue 24 item 2): the
results service as it is served (gunicorn, the served worker, 8 threads, one process) on a
fake apiserver (tests/unit/results/service_harness.py), a calm namespace asking for its plan
and reading the runs page in a loop, first alone, then while hostile pods of other namespaces
push without pause: frames of 1 MiB, stacks in the wrong format, more samples than their
ticket allows, 100,001 distinct stacks, 16 MiB of JSON keys, runs beyond their namespace's
quota, pushes with used tickets. Reported: the calm requests' p50/p99/max alone and under
attack, and what the hostile pushes were answered."""

from __future__ import annotations

import contextlib
import http.client
import json
import multiprocessing
import statistics
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from tests.cluster.cluster import free_port
from tests.unit.results.service_harness import make_service, schedule
from webhook.results import service

CALM = "calm"
HOSTILE_NAMESPACES = 4  # more than the service's push slots (service.PUSHES_IN_FLIGHT)
PODS_PER_HOSTILE = 60
QUOTA = 2 << 20


def _serve(root: Path, port: int) -> None:
    from webhook.server.results_server import serve_wsgi

    pods = {CALM: ["web"], **{f"evil-{i}": [f"p{j}" for j in range(PODS_PER_HOSTILE)]
                              for i in range(HOSTILE_NAMESPACES)}}
    subject = make_service(root, pods, annotation=schedule("bpftrace-profile", "1s", 1),
                           quota=QUOTA, max_concurrent=10_000)
    serve_wsgi(service.create_service_app(subject), "127.0.0.1", port, threads=8)


@contextlib.contextmanager
def running_service() -> Iterator[int]:
    """The service in a child process (its own gunicorn master and worker); its port."""
    with tempfile.TemporaryDirectory(prefix="results-isolation-") as work:
        port = free_port()
        process = multiprocessing.get_context("fork").Process(
            target=_serve, args=(Path(work), port))  # gunicorn forks: no daemon
        process.start()
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    if request(port, "GET", "/agent/v1/plan", f"{CALM}/web")[0] == 200:
                        break
                except OSError:
                    pass
                if time.monotonic() > deadline or not process.is_alive():
                    raise RuntimeError("the results service did not start")
                time.sleep(0.2)
            yield port
        finally:
            process.terminate()
            process.join(15)
            if process.is_alive():
                process.kill()


def request(port: int, method: str, path: str, token: str, body: bytes | None = None,
            timeout: float = 60) -> tuple[int, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        headers = {"Authorization": f"Bearer {token}"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        connection.request(method, path, body=body, headers=headers)
        answer = connection.getresponse()
        return answer.status, answer.read()
    finally:
        connection.close()


def _push_body(ticket: str, kind: str) -> bytes:
    """A hostile push of `kind` for a bpftrace-profile ticket of 1 s at 1 Hz."""
    if kind == "long-frame":
        return json.dumps({"ticket": ticket, "format": "bpftrace",
                           "stacks": "@[\n" + " " * (1 << 20) + "fib\n, node]: 1\n"}).encode()
    if kind == "wrong-format":
        return json.dumps({"ticket": ticket, "format": "folded",
                           "stacks": "main;" + " " * 60_000 + "fib 1\n"}).encode()
    if kind == "too-many-samples":
        return json.dumps({"ticket": ticket, "format": "bpftrace",
                           "stacks": "@[\n    fib\n, node]: 2487864\n"}).encode()
    if kind == "distinct-stacks":
        return json.dumps({"ticket": ticket, "format": "bpftrace", "stacks": "".join(
            f"@[\n    f{i}\n, node]: 1\n" for i in range(service.MAX_STACKS + 1))}).encode()
    if kind == "json-keys":
        return json.dumps({"ticket": ticket, "meta": {str(i): 0 for i in range(1_500_000)}}
                          ).encode()
    if kind == "over-quota":  # a valid run of ~0.5 MiB: the namespace's oldest runs go
        return json.dumps({"ticket": ticket, "format": "bpftrace", "stacks": "".join(
            f"@[\n    function_number_{i}_" + "x" * 600 + "\n, node]: 1\n" for i in range(700)
        )}).encode()
    raise ValueError(kind)


KINDS = ("long-frame", "wrong-format", "too-many-samples", "distinct-stacks", "json-keys",
         "over-quota")


def _latencies(port: int, stop: Callable[[], bool], count: int) -> list[float]:
    """Calm requests, one after the other: its plan and the runs page, alternately."""
    times: list[float] = []
    for number in range(count):
        if stop():
            break
        path, token = ("/agent/v1/plan", f"{CALM}/web") if number % 2 else ("/", "reader")
        started = time.perf_counter()
        status, _ = request(port, "GET", path, token, timeout=120)
        times.append(time.perf_counter() - started)
        if status != 200:
            raise RuntimeError(f"GET {path} answered {status}")
    return times


def _summary(times: list[float]) -> dict[str, float]:
    ordered = sorted(times)
    return {"requests": len(ordered),
            "p50_ms": round(statistics.median(ordered) * 1000, 1),
            "p99_ms": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000, 1),
            "max_ms": round(ordered[-1] * 1000, 1)}


def _attack(port: int, tickets: list[tuple[str, str]], bodies: dict[str, bytes],
            attackers: int, stopping: Any, sent_count: Any, answers: Any) -> None:
    """Hostile pushes from `attackers` threads until `stopping` is set; the answers by kind
    and status go to the queue `answers`."""
    counts: Counter[str] = Counter()
    lock = threading.Lock()

    def attack(number: int) -> None:
        sent = number
        while not stopping.is_set():
            with lock:
                token, ticket = tickets.pop() if tickets else (f"evil-{number % 4}/p0", "used")
            kind = KINDS[sent % len(KINDS)]
            sent += 1
            try:
                status: int | str = request(port, "POST", "/agent/v1/runs", token,
                                            bodies[kind].replace(b"TICKET", ticket.encode(),
                                                                 1))[0]
            except OSError as error:
                status = type(error).__name__
            with lock:
                counts[f"{kind} {status}"] += 1
                sent_count.value += 1

    threads = [threading.Thread(target=attack, args=(n,), daemon=True)
               for n in range(attackers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    answers.put(dict(sorted(counts.items())))


def measure(requests: int = 200, attackers: int = 6) -> dict[str, Any]:
    """Calm p50/p99/max alone and under attack, and the hostile pushes' answers by kind."""
    bodies = {kind: _push_body("TICKET", kind) for kind in KINDS}  # built once
    with running_service() as port:
        baseline = _summary(_latencies(port, lambda: False, requests))
        tickets: list[tuple[str, str]] = []
        for space in range(HOSTILE_NAMESPACES):
            for name in range(PODS_PER_HOSTILE):
                token = f"evil-{space}/p{name}"
                status, body = request(port, "GET", "/agent/v1/plan", token)
                runs = json.loads(body)["runs"] if status == 200 else []
                tickets.extend((token, run["ticket"]) for run in runs)
        context = multiprocessing.get_context("fork")
        stopping = context.Event()
        answers = context.Queue()
        sent = context.Value("i", 0)
        attack = context.Process(target=_attack, args=(port, tickets, bodies, attackers,
                                                        stopping, sent, answers))
        attack.start()  # its own process: the measuring client shares no GIL with it
        try:
            while sent.value < 2 * attackers:  # the attack is under way
                time.sleep(0.05)
            before = sent.value
            attacked = _summary(_latencies(port, lambda: False, requests))
            during = sent.value - before
        finally:
            stopping.set()
            counts = answers.get(timeout=180)
            attack.join(30)
    return {"baseline": baseline, "attacked": attacked, "attackers": attackers,
            "hostile_pushes_during": during, "hostile_answers": counts}


def main() -> None:
    print(json.dumps(measure(), indent=1))


if __name__ == "__main__":
    main()
