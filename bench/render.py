"""The flame graph renderer's speed (issue 18 item 6: command to HTML within the recording plus
3 s): a synthetic profile of 50,000 distinct stacks, from folded text to the HTML page
(parse, named share, page data, JSON), and, with chromium, from opening the page to the graph
drawn (flamegraph.js's performance mark `flamegraph-drawn`)."""

from __future__ import annotations

import random
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from webhook import render
from webhook.results import folded

TARGET_MS = 1000.0  # "well under a second" for 50k stacks, from folded text to HTML


def synthetic_folded(stacks: int = 50_000, seed: int = 18) -> str:
    """Folded text of `stacks` distinct stacks as a busy service's long recording has them:
    random walks down one call tree (callers share their prefixes), 8 to 60 frames deep, over a
    few thousand JIT-like names, a few `[unknown]`, counts with a long tail."""
    rng = random.Random(seed)  # noqa: S311 - a reproducible profile, not a secret
    names = [f"LazyCompile:*handler{i} /app/src/module{i % 97}.js:{i % 400}" for i in range(3000)]
    names += ["[unknown]"] * 30
    seen: set[str] = set()
    lines: list[str] = []
    while len(lines) < stacks:
        frames, node = ["node", "node::Start", "uv_run"], 1
        for _ in range(rng.randint(5, 57)):
            # a node's callees: a handful, the first ones far more often (Zipf-like)
            node = node * 7 + min(int(rng.paretovariate(1.0)), 7)
            frames.append(names[node * 2654435761 % len(names)])
        stack = ";".join(frames)
        if stack not in seen:
            seen.add(stack)
            lines.append(f"{stack} {max(1, int(rng.paretovariate(1.2)))}")
    return "\n".join(lines) + "\n"


def _median_ms(action: Callable[[], Any], rounds: int,
               clock: Callable[[], float] = time.perf_counter) -> float:
    times = []
    for _ in range(rounds):
        start = clock()
        action()
        times.append((clock() - start) * 1000)
    return round(statistics.median(times), 1)


def render_speed(stacks: int = 50_000, rounds: int = 5, browser: bool = True) -> dict[str, Any]:
    """CPU time (the machine is shared: wall time is reported beside it) of parsing and of
    rendering, and the browser's time from opening the page to the graph drawn."""
    text = synthetic_folded(stacks)
    parsed = folded.parse(text)
    profile = render.Profile(parsed, title="bench")
    page = render.render(profile)
    cpu = time.process_time
    result: dict[str, Any] = {
        "stacks": len(parsed), "frames": sum(len(s) for s in parsed),
        "folded_mb": round(len(text) / 1e6, 1), "page_mb": round(len(page.html) / 1e6, 1),
        "parse_cpu_ms": _median_ms(lambda: folded.parse(text), rounds, cpu),
        "render_cpu_ms": _median_ms(lambda: render.render(profile), rounds, cpu),
        "total_ms": _median_ms(
            lambda: render.render(render.Profile(folded.parse(text), title="bench")), rounds),
    }
    if browser:
        from tests.browser.cdp import Browser, chromium_path

        if chromium_path() is not None:
            with tempfile.TemporaryDirectory() as tmp, Browser() as chromium:
                path = Path(tmp) / "page.html"
                path.write_text(page.html, encoding="utf-8")
                draws = []
                for _ in range(rounds):
                    chromium.open(path.as_uri())
                    draws.append(chromium.evaluate(
                        "performance.getEntriesByName('flamegraph-drawn')[0].startTime"))
                result["browser_draw_ms"] = round(statistics.median(draws), 1)
                result["frames_drawn"] = chromium.evaluate(
                    "document.querySelectorAll('#flame rect').length")
    return result
