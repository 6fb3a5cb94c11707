"""Section "guard-core": CPU time of the guard's pure decision (webhook.guard.check.evaluate) per
pod, in process: the typical and the large pod the other sections send, as the webhook injected
them (profile full, so the toolset is verified by rebuilding it and its grant is asked), at both
levels. The section "guard" (bench/handler.py) measures the served route around it,
/validate-pods against the null handler."""

from __future__ import annotations

import logging
import statistics
import time
from collections.abc import Callable
from typing import Any

from bench import pods, servers
from webhook.config import Settings, load_settings
from webhook.guard import check, pss
from webhook.inject import pipeline
from webhook.policy.api import AllowAll

SHAPES = ("typical", "large")


def injected(shape: str, settings: Settings) -> dict[str, Any]:
    """The bench pod of `shape` after the webhook's injection (the same pipeline)."""
    pod = pods.POD_SHAPES[shape]()
    result = pipeline.run(pod, "bench", settings, AllowAll.offline())
    if result.status != "injected":
        raise RuntimeError(f"the {shape} pod was not injected: {result.message}")
    return result.pod


def _batch(call: Callable[[], object], seconds: float) -> int:
    call()
    batch = 1
    while True:
        started = time.perf_counter()
        for _ in range(batch):
            call()
        if time.perf_counter() - started >= seconds or batch >= 4096:
            return batch
        batch *= 2


def _cpu_ms(call: Callable[[], object], batch: int) -> float:
    started = time.thread_time()
    for _ in range(batch):
        call()
    return (time.thread_time() - started) / batch * 1000


def _calls(call: Callable[[], object]) -> int:
    import cProfile
    import pstats

    profiler = cProfile.Profile()
    profiler.runcall(call)
    return int(pstats.Stats(profiler).total_calls)  # type: ignore[attr-defined]


def guard_cost(budget_s: float = 1.0, passes: int = 9) -> dict[str, Any]:
    """Fastest batch of each (shape, level) over interleaved passes (as the scaling section),
    the median too, and Python calls (load-independent)."""
    logging.disable(logging.CRITICAL)
    try:
        settings = load_settings(environ={})
        calls: dict[tuple[str, str], Callable[[], check.GuardResult]] = {}
        results: dict[tuple[str, str], check.GuardResult] = {}
        for shape in SHAPES:
            pod = injected(shape, settings)
            for level in pss.LEVELS:

                def call(pod: Any = pod, level: pss.Level = level) -> check.GuardResult:
                    return check.evaluate(pod, settings, level, lambda profile: True)

                calls[(shape, level)] = call
                results[(shape, level)] = call()
        batches = {key: _batch(checker, budget_s / passes) for key, checker in calls.items()}
        samples: dict[tuple[str, str], list[float]] = {key: [] for key in calls}
        for _ in range(passes):
            for key, checker in calls.items():
                samples[key].append(_cpu_ms(checker, batches[key]))
        rows = []
        for key, checker in calls.items():
            shape, level_name = key
            result = results[key]
            pod = injected(shape, settings)
            rows.append({
                "shape": shape,
                "level": level_name,
                "containers": len(pod["spec"]["containers"]),
                "volumes": len(pod["spec"]["volumes"]),
                "ms": round(min(samples[key]), 4),
                "median_ms": round(statistics.median(samples[key]), 4),
                "python_calls": _calls(checker),
                "toolset_verified": [t.profile for t in result.toolsets] == ["full"],
                "violations": len(result.violations),
            })
    finally:
        logging.disable(logging.NOTSET)
    return {"rows": rows, "passes": passes, "load_average": servers.load_average()}
