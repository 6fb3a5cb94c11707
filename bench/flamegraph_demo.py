"""The flamegraph-demo section of `make bench` (issue 18, item 6): from command to HTML on the
workstation, on the demo pod of a running `make demo` (the Node sample in namespace `demo`,
injected `full` toolset), side by side with perf run directly through `kubectl exec`.

- `sidecar-debug flamegraph POD -n demo --seconds 10 -o page.html`: the whole user path (API
  look-ups, toolset verification, exec, recording, unwinding in the pod, copy-back, local
  render of the page), wall time beyond the recording;
- perf directly: `kubectl exec ... -- sh -c 'perf record -g ... && perf script'` with the text
  streamed to the workstation (what any flame graph tool starts from; no page yet).

Skipped when no demo is running. The demo's own schedule records the same pod for 10 s every
minute; a round that overlaps it is slower, so medians are reported."""

from __future__ import annotations

import json
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.cluster.cluster import Cluster
from webhook.render.model import named_share
from webhook.results import folded

REPO = Path(__file__).resolve().parent.parent
NAMESPACE = "demo"
SELECTOR = "app=fib"
DIRECT_PERF = ("perf record -q -F {hz} -g -p {pid} -o /tmp/bench-demo.data -- sleep {s} && "
               "perf script --no-inline -i /tmp/bench-demo.data 2>/dev/null; "
               "rm -f /tmp/bench-demo.data")


def flamegraph_demo_speed(rounds: int = 3, seconds: float = 10, frequency: int = 99,
                          log: Callable[[str], None] = print) -> dict[str, Any]:
    found = Cluster.attach("full")
    if found is None:
        return {"skipped": "no demo cluster is running (start one with `make demo`)"}
    cluster, env = found, found.env()

    def kubectl(*args: str, timeout: float = 60) -> str:
        return cluster.kubectl(*args, timeout=timeout).stdout

    pods = json.loads(kubectl("get", "pods", "-n", NAMESPACE, "-l", SELECTOR, "-o", "json"))
    running = [p["metadata"]["name"] for p in pods["items"]
               if p.get("status", {}).get("phase") == "Running"]
    if not running:
        return {"skipped": f"no running pod {SELECTOR} in namespace {NAMESPACE}"}
    pod = running[0]
    pid = kubectl("exec", pod, "-n", NAMESPACE, "-c", "debug-toolset", "--", "pgrep", "-o",
                  "-f", "node /app/app.js").split()[0]
    cli = str(REPO / ".venv" / "bin" / "sidecar-debug")
    runs: dict[str, list[float]] = {"flamegraph": [], "perf -g via kubectl exec": []}
    shares: list[float] = []
    with tempfile.TemporaryDirectory() as work:
        for index in range(rounds):
            log(f"flamegraph-demo round {index + 1}/{rounds} on {NAMESPACE}/{pod}")
            page = Path(work) / f"page-{index}.html"
            start = time.monotonic()
            result = subprocess.run([cli, "flamegraph", pod, "-n", NAMESPACE, "--seconds",
                                     f"{seconds:g}", "--frequency", str(frequency), "-o",
                                     str(page)], capture_output=True, text=True, env=env,
                                    timeout=seconds + 300, check=False)
            wall = time.monotonic() - start
            if result.returncode != 0 or not page.exists():
                return {"skipped": f"sidecar-debug flamegraph failed: {result.stderr[-500:]}"}
            runs["flamegraph"].append(wall - seconds)
            share = named_share(folded.parse(page.with_suffix(".folded").read_text()))
            if share is not None:
                shares.append(round(100 * share.share, 1))
            start = time.monotonic()
            kubectl("exec", pod, "-n", NAMESPACE, "-c", "debug-toolset", "--", "sh", "-c",
                    DIRECT_PERF.format(hz=frequency, pid=pid, s=f"{seconds:g}"),
                    timeout=seconds + 600)
            runs["perf -g via kubectl exec"].append(time.monotonic() - start - seconds)
    return {"pod": f"{NAMESPACE}/{pod}", "seconds": seconds, "frequency": frequency,
            "rounds": rounds,
            **{name: {"beyond_recording_s": round(statistics.median(values), 2),
                      "rounds_s": [round(value, 2) for value in values]}
               for name, values in runs.items()},
            "named_share_percent": statistics.median(shares) if shares else None}


def rows(result: dict[str, Any]) -> list[list[str]]:
    """Rows for the report: tool, time beyond the recording (median, each round)."""
    return [[name, f"{result[name]['beyond_recording_s']:.2f} s",
             " ".join(f"{value:.2f}" for value in result[name]["rounds_s"])]
            for name in ("flamegraph", "perf -g via kubectl exec") if name in result]
