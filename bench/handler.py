"""Sections 1 and 3, and the worker choice: the served handler under wrk, next to the null
handler on the same gunicorn/TLS stack; worker RSS at rest and after many reviews."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from bench import loadgen, pods, servers
from bench.servers import ServerSpec

Log = Callable[[str], None]


def check_injects(url: str, body: bytes) -> dict[str, Any]:
    """One review before the load: the server must answer with a patch, or the numbers lie."""
    review = json.loads(servers.post(url + "/mutate", body, timeout=30))
    response = review.get("response") or {}
    if not response.get("allowed") or not response.get("patch"):
        raise RuntimeError(f"the webhook did not inject: {json.dumps(response)[:500]}")
    return dict(response)


def _point(server: str, shape: str, result: loadgen.LoadResult) -> dict[str, Any]:
    return {"server": server, "shape": shape, "load_average": servers.load_average(),
            **result.as_dict()}


def _per_review(cpu_s: float, result: loadgen.LoadResult) -> float:
    return round(cpu_s * 1000 / result.requests, 3) if result.requests else 0.0


def handler_cost(cert: Path, key: Path, workdir: Path, spec: ServerSpec, *,
                 shapes: Sequence[str], concurrencies: Sequence[int], seconds: float,
                 log: Log, rounds: int = 1) -> dict[str, Any]:
    """Every (shape, concurrency) point against the webhook and, right after, the null handler
    as a Flask app and as a plain WSGI app (interleaved, so all see the same machine load);
    `rounds` times over, each server's median round reported (a loaded machine's spikes then
    hit one round of each instead of one server's only point)."""
    def null_spec(app: str) -> ServerSpec:
        return ServerSpec(app=app, workers=spec.workers, threads=spec.threads,
                          worker_class=spec.worker_class, env=spec.env)

    points: list[dict[str, Any]] = []
    with servers.serve(spec, cert, key, workdir) as webhook, \
            servers.serve(null_spec("null-flask"), cert, key, workdir) as null_flask, \
            servers.serve(null_spec("null"), cert, key, workdir) as null:
        served = (("webhook", webhook), ("null-flask", null_flask), ("null", null))
        for shape in shapes:
            body = pods.review_body(shape)
            check_injects(webhook.url, body)
            for _, server in served:  # warm-up: imports, caches, TLS sessions
                loadgen.run(server.url + "/mutate", body, 8, min(2.0, seconds))
            for concurrency in concurrencies:
                for round_index in range(rounds):
                    for name, server in served:
                        cpu, steal = server.cpu_seconds(), servers.steal_seconds()
                        result = loadgen.run(server.url + "/mutate", body, concurrency, seconds)
                        point = _point(name, shape, result)
                        point["round"] = round_index
                        point["cpu_ms_per_review"] = _per_review(
                            server.cpu_seconds() - cpu, result)
                        point["steal_s"] = round(servers.steal_seconds() - steal, 2)
                        points.append(point)
                        log(f"handler {shape:8} c={concurrency:<3} {name:10} "
                            f"{result.rps:8.1f}/s p50 {result.p50_ms:7.2f} ms  "
                            f"p99 {result.p99_ms:7.2f} ms  "
                            f"cpu {point['cpu_ms_per_review']:.3f} ms/review")
    return {"server": spec.label(), "seconds_per_point": seconds, "rounds": rounds,
            "points": points, "comparisons": compare(points)}


def guard_body(mutate_body: bytes, response: Mapping[str, Any]) -> bytes:
    """The guard's review of the pod the webhook just injected: what the apiserver sends to the
    validating webhook after the mutation (same request, patched object)."""
    import base64

    from webhook.inject.patch import apply_patch

    review = json.loads(mutate_body)
    patch = json.loads(base64.b64decode(response["patch"]))
    review["request"]["object"] = apply_patch(review["request"]["object"], patch)
    return json.dumps(review, separators=(",", ":")).encode()


def check_guard_allows(url: str, body: bytes) -> None:
    review = json.loads(servers.post(url + "/validate-pods", body, timeout=30))
    response = review.get("response") or {}
    if not response.get("allowed"):
        raise RuntimeError(f"the guard refused the injected pod: {json.dumps(response)[:500]}")


def guard_cost(cert: Path, key: Path, workdir: Path, spec: ServerSpec, *,
               shapes: Sequence[str], concurrencies: Sequence[int], seconds: float,
               log: Log, rounds: int = 1) -> dict[str, Any]:
    """The guard (/validate-pods) on the pod the webhook injected, next to the null handler on
    the same stack, interleaved round by round as handler_cost does: what the guard's checks
    (Pod Security, toolset verification, the cached grant and namespace) cost per review."""
    null_spec = ServerSpec(app="null", workers=spec.workers, threads=spec.threads,
                           worker_class=spec.worker_class, env=spec.env)
    points: list[dict[str, Any]] = []
    with servers.serve(spec, cert, key, workdir) as webhook, \
            servers.serve(null_spec, cert, key, workdir) as null:
        for shape in shapes:
            mutate_body = pods.review_body(shape)
            body = guard_body(mutate_body, check_injects(webhook.url, mutate_body))
            check_guard_allows(webhook.url, body)
            for server in (webhook, null):
                loadgen.run(server.url + "/validate-pods", body, 8, min(2.0, seconds))
            for concurrency in concurrencies:
                for round_index in range(rounds):
                    for name, server in (("webhook", webhook), ("null", null)):
                        cpu = server.cpu_seconds()
                        result = loadgen.run(server.url + "/validate-pods", body, concurrency,
                                             seconds)
                        point = _point(name, shape, result)
                        point["round"] = round_index
                        point["cpu_ms_per_review"] = _per_review(
                            server.cpu_seconds() - cpu, result)
                        points.append(point)
                        log(f"guard   {shape:8} c={concurrency:<3} {name:10} "
                            f"{result.rps:8.1f}/s p50 {result.p50_ms:7.2f} ms  "
                            f"p99 {result.p99_ms:7.2f} ms  "
                            f"cpu {point['cpu_ms_per_review']:.3f} ms/review")
    return {"server": spec.label(), "seconds_per_point": seconds, "rounds": rounds,
            "points": points, "comparisons": compare(points)}


def median_points(points: Sequence[Mapping[str, Any]]) -> dict[tuple[str, str, int],
                                                                 dict[str, Any]]:
    """(server, shape, concurrency) -> its median round by reviews/s, with every round's
    reviews/s and CPU per review beside it (`rounds_rps`, `rounds_cpu_ms`)."""
    grouped: dict[tuple[str, str, int], list[Mapping[str, Any]]] = {}
    for p in points:
        grouped.setdefault((p["server"], p["shape"], p["concurrency"]), []).append(p)
    medians = {}
    for key, runs in grouped.items():
        ordered = sorted(runs, key=lambda r: r["rps"])
        medians[key] = {**ordered[len(ordered) // 2],
                        "rounds_rps": [r["rps"] for r in runs],
                        "rounds_cpu_ms": [r.get("cpu_ms_per_review") for r in runs]}
    return medians


def compare(points: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Webhook against null for each (shape, concurrency): ratios and the p99 difference, and
    the CPU per request of the null handler as a Flask app (what Flask adds)."""
    by_key = median_points(points)
    rows = []
    for (server, shape, concurrency), hook in by_key.items():
        null = by_key.get(("null", shape, concurrency))
        if server != "webhook" or null is None:
            continue
        null_flask = by_key.get(("null-flask", shape, concurrency)) or {}
        rows.append({
            "shape": shape, "concurrency": concurrency,
            "webhook_rps": hook["rps"], "null_rps": null["rps"],
            "rps_ratio": round(hook["rps"] / null["rps"], 3) if null["rps"] else None,
            "webhook_p50_ms": hook["p50_ms"], "null_p50_ms": null["p50_ms"],
            "webhook_p99_ms": hook["p99_ms"], "null_p99_ms": null["p99_ms"],
            "p99_ratio": round(hook["p99_ms"] / null["p99_ms"], 2) if null["p99_ms"] else None,
            "p99_delta_ms": round(hook["p99_ms"] - null["p99_ms"], 3),
            "webhook_cpu_ms": hook.get("cpu_ms_per_review"),
            "null_cpu_ms": null.get("cpu_ms_per_review"),
            "null_flask_rps": null_flask.get("rps"),
            "null_flask_cpu_ms": null_flask.get("cpu_ms_per_review"),
            "null_flask_p99_ms": null_flask.get("p99_ms"),
            "flask_cost_ms": flask_cost(points, shape, concurrency),
            "rounds_rps": {"webhook": hook["rounds_rps"], "null-flask":
                           null_flask.get("rounds_rps"), "null": null["rounds_rps"]},
            "rounds_cpu_ms": {"webhook": hook["rounds_cpu_ms"], "null-flask":
                              null_flask.get("rounds_cpu_ms"), "null": null["rounds_cpu_ms"]},
        })
    return rows


def flask_cost(points: Sequence[Mapping[str, Any]], shape: str,
               concurrency: int) -> float | None:
    """What Flask costs per request: the null Flask app's CPU per request minus the plain null
    handler's, paired round by round (they ran back to back), the median over the rounds."""
    cpu = {(p["server"], p.get("round", 0)): p.get("cpu_ms_per_review") for p in points
           if p["shape"] == shape and p["concurrency"] == concurrency}
    differences = sorted(
        flask - plain for (server, round_index), flask in cpu.items()
        if server == "null-flask" and flask is not None
        and (plain := cpu.get(("null", round_index))) is not None)
    return round(differences[len(differences) // 2], 3) if differences else None


def worker_choice(cert: Path, key: Path, workdir: Path, specs: Sequence[ServerSpec], *,
                  shape: str, concurrencies: Sequence[int], seconds: float, rounds: int,
                  log: Log) -> list[dict[str, Any]]:
    """The same load against each worker class/count (the webhook only). All servers run at
    once (idle ones cost nothing) and the rounds go over every config in turn, so a load spike
    from elsewhere hits one round of every config instead of all rounds of one; each config
    reports its median round."""
    body = pods.review_body(shape)
    rounds_by_key: dict[tuple[str, int], list[dict[str, Any]]] = {}
    with contextlib.ExitStack() as stack:
        started = [(spec, stack.enter_context(servers.serve(spec, cert, key, workdir)))
                   for spec in specs]
        for _, server in started:
            check_injects(server.url, body)
            loadgen.run(server.url + "/mutate", body, 8, min(2.0, seconds))
        for round_index in range(rounds):
            for spec, server in started:
                for concurrency in concurrencies:
                    cpu, steal = server.cpu_seconds(), servers.steal_seconds()
                    pids = server.worker_pids()
                    per_worker = [servers.cpu_seconds([pid]) for pid in pids]
                    result = loadgen.run(server.url + "/mutate", body, concurrency, seconds)
                    worker_cpu = [round(servers.cpu_seconds([pid]) - before, 2)
                                  for pid, before in zip(pids, per_worker, strict=True)]
                    row = {"config": spec.label(), "worker_class": spec.worker_class,
                           "workers": spec.workers, "threads": spec.threads, "shape": shape,
                           "round": round_index, "load_average": servers.load_average(),
                           "cpu_ms_per_review": _per_review(server.cpu_seconds() - cpu, result),
                           # How evenly the connections spread: 1/workers is even, 1.0 is
                           # every review on one worker.
                           "worker_cpu_s": worker_cpu,
                           "steal_s": round(servers.steal_seconds() - steal, 2),
                           "busiest_worker_share": round(max(worker_cpu) / sum(worker_cpu), 2)
                           if sum(worker_cpu) > 0 else None,
                           **result.as_dict()}
                    rounds_by_key.setdefault((spec.label(), concurrency), []).append(row)
                    log(f"workers {spec.label():14} c={concurrency:<3} round {round_index} "
                        f"{result.rps:8.1f}/s p50 {result.p50_ms:7.2f} ms  "
                        f"p99 {result.p99_ms:7.2f} ms  cpu {row['cpu_ms_per_review']} ms/review "
                        f" per worker {worker_cpu} s")
    rows = []
    for (_, _), runs in rounds_by_key.items():
        median = sorted(runs, key=lambda r: r["rps"])[len(runs) // 2]
        rows.append({**median, "rounds": [{k: r[k] for k in (
            "rps", "p50_ms", "p99_ms", "cpu_ms_per_review", "worker_cpu_s",
            "busiest_worker_share", "steal_s", "load_average")} for r in runs]})
    return rows


def memory(cert: Path, key: Path, workdir: Path, spec: ServerSpec, *, reviews: int,
           chunk_seconds: float, shape: str, log: Log) -> dict[str, Any]:
    """RSS of every worker at rest, then after each chunk of load until `reviews` were served.

    Growth is measured from the end of the first chunk (imports done, caches and allocator
    pools filled) to the end; a leak shows as steady growth across the chunks."""
    body = pods.review_body(shape)
    with servers.serve(spec, cert, key, workdir) as server:
        time.sleep(1)
        workers = server.worker_pids()
        at_rest = {pid: servers.rss_kib(pid) for pid in workers}
        log(f"memory at rest (KiB): {at_rest}")
        check_injects(server.url, body)
        samples: list[dict[str, Any]] = []
        served = 0
        while served < reviews:
            result = loadgen.run(server.url + "/mutate", body, 8, chunk_seconds)
            served += result.requests
            rss = {pid: servers.rss_kib(pid) for pid in workers}
            samples.append({"reviews": served, "rss_kib": rss, "rps": result.rps,
                            "errors": result.errors, "load_average": servers.load_average()})
            log(f"memory after {served:7d} reviews: {rss} KiB")
        if server.worker_pids() != workers:
            raise RuntimeError("a worker was replaced during the memory run (crash or timeout)")
    first, last = samples[0]["rss_kib"], samples[-1]["rss_kib"]
    growth = {str(pid): last[pid] - first[pid] for pid in workers}
    return {
        "server": spec.label(), "shape": shape, "reviews": served,
        "workers": [str(pid) for pid in workers],
        "rss_at_rest_kib": {str(k): v for k, v in at_rest.items()},
        "rss_after_first_chunk_kib": {str(k): v for k, v in first.items()},
        "rss_at_end_kib": {str(k): v for k, v in last.items()},
        "growth_after_warmup_kib": growth,
        "samples": [{**s, "rss_kib": {str(k): v for k, v in s["rss_kib"].items()}}
                    for s in samples],
    }


def slow_clients(cert: Path, key: Path, workdir: Path, specs: Sequence[ServerSpec], *,
                 counts: Sequence[int], concurrency: int, seconds: float, shape: str,
                 log: Log) -> list[dict[str, Any]]:
    """Reviews under wrk while `count` slow clients (bench/slowloris.py) hold connections to the
    same server, replaced as soon as the server closes them; for each config and count."""
    from bench.slowloris import SlowClients

    body = pods.review_body(shape)
    rows: list[dict[str, Any]] = []
    for spec in specs:
        with servers.serve(spec, cert, key, workdir) as server:
            check_injects(server.url, body)
            loadgen.run(server.url + "/mutate", body, concurrency, min(2.0, seconds))
            port = int(server.url.rsplit(":", 1)[1])
            for count in counts:
                with SlowClients("127.0.0.1", port, count, reopen=True) as slow:
                    try:
                        slow.wait_all_open(timeout_s=30)
                    except TimeoutError as exc:  # the server no longer completes handshakes
                        log(f"slow clients: {exc}")
                    cpu = server.cpu_seconds()
                    result = loadgen.run(server.url + "/mutate", body, concurrency, seconds)
                    lifetimes = sorted(c.lifetime_s for c in slow.closed)
                    row = {"config": spec.label(), "slow_clients": count, "shape": shape,
                           "slow_opened": slow.opened_total,
                           "slow_closed_by_server": len(slow.closed),
                           "slow_lifetime_median_s": lifetimes[len(lifetimes) // 2]
                           if lifetimes else None,
                           "cpu_ms_per_review": _per_review(server.cpu_seconds() - cpu, result),
                           "load_average": servers.load_average(), **result.as_dict()}
                rows.append(row)
                log(f"slow clients {spec.label():14} {count:3} slow  {result.rps:8.1f}/s "
                    f"p50 {result.p50_ms:7.2f} ms  p99 {result.p99_ms:7.2f} ms  "
                    f"max {result.max_ms:8.1f} ms  errors {result.errors}  "
                    f"slow closed {len(slow.closed)}")
    return rows
