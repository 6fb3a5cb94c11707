"""Section 2: time of one review (parse, Mutator.review, serialise) as the pod grows, in
process, with the real policy gate answered by an in-memory cluster (no network), and a fit."""

from __future__ import annotations

import json
import logging
import statistics
import time
from collections.abc import Mapping, Sequence
from typing import Any

from bench import pods
from webhook.config import Settings, load_settings
from webhook.mutate import Mutator
from webhook.policy import load_policy_engine
from webhook.rbac import AccessCheck

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


def time_review(m: Mutator, body: bytes, budget_s: float = 0.3, repeats: int = 7) -> float:
    """Median over `repeats` batches of the mean time (ms) of one review; a batch runs at least
    `budget_s / repeats` seconds."""
    def one() -> None:
        json.dumps(m.review(json.loads(body)), separators=(",", ":"))

    one()
    batch = 1
    while True:  # size a batch
        started = time.perf_counter()
        for _ in range(batch):
            one()
        if time.perf_counter() - started >= budget_s / repeats or batch >= 4096:
            break
        batch *= 2
    samples = []
    for _ in range(repeats):
        started = time.perf_counter()
        for _ in range(batch):
            one()
        samples.append((time.perf_counter() - started) / batch * 1000)
    return statistics.median(samples)


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


def scaling(sizes: Sequence[int] = SIZES, budget_s: float = 0.3) -> dict[str, Any]:
    logging.disable(logging.CRITICAL)  # timing the handler, not the log sink
    try:
        m = mutator()
        rows = []
        for containers in sizes:
            pod = pods.pod(containers=containers)
            body = json.dumps(pods.admission_review(pod), separators=(",", ":")).encode()
            review = m.review(json.loads(body))
            if not review.get("response", {}).get("patch"):
                raise RuntimeError(f"no patch for a pod of {containers} containers")
            rows.append({"containers": containers, "body_bytes": len(body),
                         "ms": round(time_review(m, body, budget_s), 4)})
    finally:
        logging.disable(logging.NOTSET)
    line = fit([r["containers"] for r in rows], [r["ms"] for r in rows])
    return {"rows": rows, "fit": line, "ms_at_max": rows[-1]["ms"],
            "max_containers": rows[-1]["containers"]}
