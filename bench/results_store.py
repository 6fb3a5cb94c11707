"""`make bench` section `results-store`: what a results volume of months of runs costs the
results service, on a generated store (the layout Store.save writes: a directory per run with
stacks.folded and meta.json).

Per point (runs, namespaces, pods), each in a process of its own (clean memory numbers):
- generate: writing the runs (not the service's cost; how long the point took to set up);
- rebuild: the index built from the runs (every meta.json read): a lost or corrupt index;
- restart: opening an intact index, every pod directory stat'ed, no run read;
- page: /api/runs and the HTML page through the Flask app (the service's own, a reader allowed
  every namespace), p50/p99 of: the first page, a page 50 pages deep, one namespace, one pod,
  a technique in a time range;
- quota: the rows of one namespace (what a push's quota check reads);
- retention: a pass that removes nothing, then one that removes a run per pod, each with the
  disk use per namespace summed for the metrics;
- full-walk: the tree read the way the page read it before the index (for comparison; only
  up to --full-walk-max runs);
- memory: the process's RSS after imports, and its peak (VmHWM) after all of the above.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

POINTS = "10000:10:100,100000:10:1000,100000:1000:10000"
MAX_PAGE_P99_MS = 200.0  # issue 25: a page of a 100,000-run store
END = datetime(2026, 12, 1, tzinfo=UTC)
TECHNIQUES = ("perf", "py-spy", "bpftrace-profile")
STACKS = "".join(f"main;serve;handler;work_{i};leaf_{i % 7} {10 + i}\n" for i in range(40))


def _rss_kib(field: str = "VmRSS") -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def generate(root: Path, runs: int, namespaces: int, pods: int) -> None:
    """`runs` runs spread evenly over `pods` pods in `namespaces` namespaces, each pod's runs
    7 hours apart ending at END (100 runs: four weeks)."""
    per_pod = max(1, runs // pods)
    stamp_format = "%Y%m%dT%H%M%SZ"
    for p in range(pods):
        namespace, pod = f"team-{p % namespaces:04d}", f"app-{p:05d}-7d9f8c6b5-x2x4z"
        pod_dir = root / namespace / pod
        pod_dir.mkdir(parents=True, exist_ok=True)
        for r in range(per_pod):
            started = END - timedelta(hours=7 * r, seconds=p % 3600)
            technique = TECHNIQUES[(p + r) % len(TECHNIQUES)]
            run_dir = pod_dir / f"{started.strftime(stamp_format)}-{technique}"
            run_dir.mkdir()
            (run_dir / "stacks.folded").write_text(STACKS)
            meta = {"namespace": namespace, "pod": pod, "technique": technique,
                    "started": started.strftime("%Y-%m-%dT%H:%M:%SZ"), "samples": 1580,
                    "hottest": [[f"leaf_{i}", 300 - i] for i in range(10)], "duration": 30,
                    "frequency": 99, "schedule": "nightly", "cron": "0 2 * * *",
                    "trigger": "schedule", "summary": "1580 samples, 97 % named",
                    "container": "sidecar-debug", "serviceName": "shop"}
            (run_dir / "meta.json").write_text(json.dumps(meta, indent=2, sort_keys=True))


def _timed(action: Callable[[], Any]) -> tuple[float, Any]:
    began = time.perf_counter()
    value = action()
    return time.perf_counter() - began, value


def _percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {"p50_ms": round(1000 * statistics.median(ordered), 2),
            "p99_ms": round(1000 * ordered[min(len(ordered) - 1,
                                               int(0.99 * len(ordered)))], 2),
            "max_ms": round(1000 * ordered[-1], 2), "n": len(ordered)}


class AllowAll:
    def reader(self, header: str | None) -> str:
        return "reader"

    def can_read(self, user: Any, namespace: str) -> bool:
        return True


def point(root: Path, runs: int, namespaces: int, pods: int, requests: int,
          full_walk_max: int) -> dict[str, Any]:
    """One point, in this process (run it in a process of its own)."""
    from webhook.results.index import INDEX_DIR, Query
    from webhook.results.store import Store
    from webhook.results.web import create_app

    rss_start = _rss_kib()
    result: dict[str, Any] = {"runs": runs, "namespaces": namespaces, "pods": pods}
    result["generate_s"] = round(_timed(lambda: generate(root, runs, namespaces, pods))[0], 1)
    store = Store(root)
    result["rebuild_s"] = round(_timed(lambda: store.index)[0], 2)
    assert store.page(Query()).total == runs, "the index lost runs"
    store.index.close()
    store = Store(root)
    result["restart_s"] = round(_timed(lambda: store.index)[0], 3)
    assert store.index.rebuilds == [], store.index.rebuilds
    index_file = root / INDEX_DIR / "runs.sqlite3"
    result["index_bytes"] = index_file.stat().st_size
    result["index_bytes_per_run"] = round(index_file.stat().st_size / runs)

    client = create_app(root, access=AllowAll(), store=store).test_client()
    auth = {"Authorization": "Bearer reader"}
    deep = "/api/runs?limit=100"
    for _ in range(50):
        link = client.get(deep, headers=auth).headers.get("Link", "")
        deep = link[1:link.index(">")] if link else deep
    some_namespace, some_pod = "team-0001", "app-00001-7d9f8c6b5-x2x4z"
    since = (END - timedelta(days=7)).strftime("%Y-%m-%dT%H:%M:%SZ")
    kinds = {
        "first": "/api/runs?limit=100",
        "deep (page 51)": deep,
        "namespace": f"/api/runs?limit=100&namespace={some_namespace}",
        "pod": f"/api/runs?limit=100&namespace={some_namespace}&pod={some_pod}",
        "technique, last 7 days": f"/api/runs?limit=100&technique=perf&since={since}",
        "html page": "/",
    }
    pages: dict[str, Any] = {}
    for kind, url in kinds.items():
        times = []
        for _ in range(requests):
            began = time.perf_counter()
            answer = client.get(url, headers=auth)
            times.append(time.perf_counter() - began)
            assert answer.status_code == 200, (url, answer.status_code)
        pages[kind] = _percentiles(times)
    result["page"] = pages
    result["page_p99_ms_worst"] = max(p["p99_ms"] for p in pages.values())

    result["quota_ms"] = round(1000 * _timed(
        lambda: store.index.namespace_runs(some_namespace))[0], 2)
    now = END + timedelta(hours=1)
    took, removed = _timed(lambda: (store.prune(keep=None, max_age=timedelta(days=3650),
                                                now=now), store.index.usage()))
    result["retention_nothing_s"] = round(took, 3)
    per_pod = max(1, runs // pods)
    took, (removed, _) = _timed(lambda: (store.prune(keep=per_pod - 1, max_age=None, now=now),
                                         store.index.usage()))
    result["retention_remove_s"] = round(took, 3)
    result["retention_removed"] = len(removed)
    if runs <= full_walk_max:
        result["full_walk_s"] = round(_timed(lambda: store.runs())[0], 2)
    result["rss_start_mib"] = round(rss_start / 1024, 1)
    result["rss_mib"] = round(_rss_kib() / 1024, 1)
    result["rss_peak_mib"] = round(_rss_kib("VmHWM") / 1024, 1)
    return result


def measure(points: str = POINTS, requests: int = 100, full_walk_max: int = 10_000,
            log: Callable[[str], None] = print) -> dict[str, Any]:
    """Every point in a child process over a fresh directory; the rows and how each cost
    grows from the first point to the others."""
    rows = []
    for spec in points.split(","):
        runs, namespaces, pods = (int(x) for x in spec.split(":"))
        log(f"results-store: {runs} runs, {namespaces} namespaces, {pods} pods")
        with tempfile.TemporaryDirectory(prefix="sidecar-debug-store-") as tmp:
            done = subprocess.run(
                [sys.executable, "-m", "bench.results_store", "--point", spec, "--dir", tmp,
                 "--requests", str(requests), "--full-walk-max", str(full_walk_max)],
                capture_output=True, text=True, check=False, env={**os.environ})
            if done.returncode != 0:
                raise RuntimeError(f"results-store point {spec} failed: {done.stderr[-2000:]}")
            row = json.loads(done.stdout.strip().splitlines()[-1])
            log(f"results-store: {json.dumps(row)}")
            rows.append(row)
            shutil.rmtree(tmp, ignore_errors=True)
    return {"points": rows, "growth": _growth(rows)}


def _growth(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each point's cost against the first: how it grows with runs and namespaces."""
    if not rows:
        return []
    base = rows[0]
    keys = ("rebuild_s", "restart_s", "page_p99_ms_worst", "retention_nothing_s",
            "rss_peak_mib")
    return [{"runs": row["runs"], "namespaces": row["namespaces"],
             **{f"{key} x": round(row[key] / base[key], 1) if base[key] else None
                for key in keys}} for row in rows[1:]]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.results_store")
    parser.add_argument("--point", help="RUNS:NAMESPACES:PODS (one point, this process)")
    parser.add_argument("--points", default=POINTS)
    parser.add_argument("--dir", type=Path)
    parser.add_argument("--requests", type=int, default=100)
    parser.add_argument("--full-walk-max", type=int, default=10_000)
    args = parser.parse_args(argv)
    if args.point:
        runs, namespaces, pods = (int(x) for x in args.point.split(":"))
        root = args.dir or Path(tempfile.mkdtemp(prefix="sidecar-debug-store-"))
        print(json.dumps(point(root, runs, namespaces, pods, args.requests,
                               args.full_walk_max)))
        return 0
    print(json.dumps(measure(args.points, args.requests, args.full_walk_max,
                             log=lambda m: print(m, file=sys.stderr)), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
