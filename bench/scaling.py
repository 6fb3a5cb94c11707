"""Section 2: CPU time of one review (parse, Mutator.review, serialise) as the pod grows, in
process, with the real policy gate answered by an in-memory cluster (no network), and a fit."""

from __future__ import annotations

import json
import logging
import statistics
import time
from collections.abc import Mapping, Sequence
from typing import Any

from bench import pods, servers
from webhook.admission.mutate import Mutator
from webhook.config import Settings, load_settings
from webhook.kube.access import AccessCheck
from webhook.policy.engine import load_policy_engine

SIZES = (1, 2, 5, 10, 15, 20, 30, 40, 50)


class InMemoryCluster:
    """The two API calls the gate makes, answered at once: no grant, no namespace labels."""

    def access_allowed(self, check: AccessCheck, timeout: float) -> bool:
        return False

    def namespace_labels(self, name: str, timeout: float) -> Mapping[str, str]:
        return {}


def mutator(settings: Settings | None = None) -> Mutator:
    settings = settings or load_settings(environ={})
    return Mutator(settings, load_policy_engine(settings, cluster=InMemoryCluster()))


def _one(m: Mutator, body: bytes) -> None:
    json.dumps(m.review(json.loads(body)), separators=(",", ":"))


def batch_size(m: Mutator, body: bytes, seconds: float) -> int:
    """How many reviews take about `seconds`."""
    _one(m, body)
    batch = 1
    while True:
        started = time.perf_counter()
        for _ in range(batch):
            _one(m, body)
        if time.perf_counter() - started >= seconds or batch >= 4096:
            return batch
        batch *= 2


def python_calls(m: Mutator, body: bytes) -> int:
    """Python function calls in one review (cProfile's count): a measure of the work done that,
    unlike any clock, is the same on a busy machine and an idle one."""
    import cProfile
    import pstats

    profiler = cProfile.Profile()
    profiler.runcall(_one, m, body)
    return int(pstats.Stats(profiler).total_calls)  # type: ignore[attr-defined]


def time_batch(m: Mutator, body: bytes, batch: int) -> float:
    """Mean CPU time (ms) of one review over a batch: this thread's CPU clock, which does not
    run while other processes have the core (wall time on a shared machine mostly measures
    them)."""
    started = time.thread_time()
    for _ in range(batch):
        _one(m, body)
    return (time.thread_time() - started) / batch * 1000


def fit(xs: Sequence[float], ys: Sequence[float]) -> dict[str, float]:
    """Least squares y = a + b*x, its R^2, and how much a quadratic term would add at max x."""
    n = len(xs)
    mean_x, mean_y = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mean_x) ** 2 for x in xs)
    sxy = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True))
    slope = sxy / sxx
    intercept = mean_y - slope * mean_x
    ss_res = sum((y - intercept - slope * x) ** 2 for x, y in zip(xs, ys, strict=True))
    ss_tot = sum((y - mean_y) ** 2 for y in ys)
    r2 = 1 - ss_res / ss_tot if ss_tot else 1.0
    return {"intercept_ms": round(intercept, 4), "ms_per_container": round(slope, 4),
            "r2": round(r2, 4)}


def scaling(
    sizes: Sequence[int] = SIZES, budget_s: float = 1.0, passes: int = 15
) -> dict[str, Any]:
    """Passes over every size in turn, keeping each size's fastest batch: on a shared machine
    the minimum is the estimate least disturbed by other processes (timeit's advice), and
    interleaving spreads a load spike over all sizes instead of bending the curve."""
    logging.disable(logging.CRITICAL)  # timing the handler, not the log sink
    try:
        m = mutator()
        bodies, batches = {}, {}
        for containers in sizes:
            pod = pods.pod(containers=containers)
            body = json.dumps(pods.admission_review(pod), separators=(",", ":")).encode()
            review = m.review(json.loads(body))
            if not review.get("response", {}).get("patch"):
                raise RuntimeError(f"no patch for a pod of {containers} containers")
            bodies[containers] = body
            batches[containers] = batch_size(m, body, budget_s / passes)
        best = {c: float("inf") for c in sizes}
        medians: dict[int, list[float]] = {c: [] for c in sizes}
        for _ in range(passes):
            for containers in sizes:
                ms = time_batch(m, bodies[containers], batches[containers])
                best[containers] = min(best[containers], ms)
                medians[containers].append(ms)
        rows = [{"containers": c, "body_bytes": len(bodies[c]), "ms": round(best[c], 4),
                 "median_ms": round(statistics.median(medians[c]), 4),
                 "python_calls": python_calls(m, bodies[c])} for c in sizes]
    finally:
        logging.disable(logging.NOTSET)
    line = fit([r["containers"] for r in rows], [r["ms"] for r in rows])
    calls = fit([r["containers"] for r in rows], [r["python_calls"] for r in rows])
    return {"rows": rows, "fit": line, "calls_fit": {"intercept": calls["intercept_ms"],
                                                     "per_container": calls["ms_per_container"],
                                                     "r2": calls["r2"]},
            "ms_at_max": rows[-1]["ms"],
            "max_containers": rows[-1]["containers"], "passes": passes,
            "load_average": servers.load_average()}
