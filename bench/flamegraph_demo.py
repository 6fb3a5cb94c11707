"""The flamegraph-demo section of `make bench` (issue 18, item 6): from command to HTML on the
workstation, on the demo pod of a running `make demo` (the Node sample in namespace `demo`,
injected `full` toolset), side by side with perf run directly through `kubectl exec`.

- `sidecar-debug flamegraph POD -n demo --seconds 10 -o page.html`: the whole user path (API
  look-ups, toolset verification, exec, recording, unwinding in the pod, copy-back, local
  render of the page), wall time beyond the recording;
- perf directly: `kubectl exec ... -- sh -c 'perf record -g ... && perf script'` with the text
  streamed to the workstation (what any flame graph tool starts from; no page yet);
- the same user path for `--type wall` and `--type offcpu` (issue 23, item 8: every type within
  the recording plus 3 s), each with the pod's own account of its phases (meta.json `timings`
  and `cpu_seconds`: CPU seconds tell the work from the waiting on a busy machine).

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
from webhook.stacks import folded

REPO = Path(__file__).resolve().parent.parent
NAMESPACE = "demo"
SELECTOR = "app=fib"
DIRECT_PERF = ("perf record -q -F {hz} -g -p {pid} -o /tmp/bench-demo.data -- sleep {s} && "
               "perf script --no-inline -i /tmp/bench-demo.data 2>/dev/null; "
               "rm -f /tmp/bench-demo.data")
# The run directory --keep-remote left in the pod (the newest), its meta.json read, then removed.
LAST_RUN_META = ("d=$(ls -dt /tmp/sidecar-debug/session-flamegraph-* | head -1) && "
                 'cat "$d/meta.json" && rm -rf "$d"')
TYPES = ("wall", "offcpu")  # beside `flamegraph` (cpu, the default)


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
    runs: dict[str, list[float]] = {"flamegraph": [], "perf -g via kubectl exec": [],
                                    **{f"flamegraph --type {kind}": [] for kind in TYPES}}
    shares: dict[str, list[float]] = {name: [] for name in runs}
    phases: dict[str, list[dict[str, dict[str, float]]]] = {name: [] for name in runs}

    def ours(name: str, kind: str, page: Path) -> str | None:
        """One `sidecar-debug flamegraph` of `kind`, timed; None, or why it failed."""
        start = time.monotonic()
        result = subprocess.run([cli, "flamegraph", pod, "-n", NAMESPACE, "--seconds",
                                 f"{seconds:g}", "--frequency", str(frequency), "-o",
                                 str(page), "--type", kind, "--keep-remote"],
                                capture_output=True, text=True, env=env,
                                timeout=seconds + 300, check=False)
        wall = time.monotonic() - start
        if result.returncode != 0 or not page.exists():
            return f"sidecar-debug flamegraph --type {kind} failed: {result.stderr[-500:]}"
        runs[name].append(wall - seconds)
        meta = json.loads(kubectl("exec", pod, "-n", NAMESPACE, "-c", "debug-toolset", "--",
                                  "sh", "-c", LAST_RUN_META) or "{}")
        # The pod's count (its own root frames, [on CPU] and [off CPU: ...], are not frames
        # of the app); else the page's.
        share = meta.get("named_share")
        if share is None:
            page_share = named_share(folded.parse(page.with_suffix(".folded").read_text()))
            share = page_share.share if page_share is not None else None
        if share is not None:
            shares[name].append(round(100 * float(share), 1))
        if "timings" in meta:
            phases[name].append({"wall_s": meta["timings"],
                                 "cpu_s": meta.get("cpu_seconds", {})})
        return None

    with tempfile.TemporaryDirectory() as work:
        for index in range(rounds):
            log(f"flamegraph-demo round {index + 1}/{rounds} on {NAMESPACE}/{pod}")
            failed = ours("flamegraph", "cpu", Path(work) / f"page-{index}.html")
            if failed:
                return {"skipped": failed}
            start = time.monotonic()
            kubectl("exec", pod, "-n", NAMESPACE, "-c", "debug-toolset", "--", "sh", "-c",
                    DIRECT_PERF.format(hz=frequency, pid=pid, s=f"{seconds:g}"),
                    timeout=seconds + 600)
            runs["perf -g via kubectl exec"].append(time.monotonic() - start - seconds)
            for kind in TYPES:
                failed = ours(f"flamegraph --type {kind}", kind,
                              Path(work) / f"page-{kind}-{index}.html")
                if failed:
                    return {"skipped": failed}
    return {"pod": f"{NAMESPACE}/{pod}", "seconds": seconds, "frequency": frequency,
            "rounds": rounds,
            **{name: {"beyond_recording_s": round(statistics.median(values), 2),
                      "rounds_s": [round(value, 2) for value in values],
                      **({"named_share_percent": statistics.median(shares[name])}
                         if shares[name] else {}),
                      **({"phases_median": median_phases(phases[name])}
                         if phases[name] else {})}
               for name, values in runs.items()},
            "named_share_percent": (statistics.median(shares["flamegraph"])
                                    if shares["flamegraph"] else None)}


def median_phases(rounds: list[dict[str, dict[str, float]]]) -> dict[str, dict[str, float]]:
    """Per clock (wall_s, cpu_s) and phase, the median over the rounds."""
    return {clock: {phase: round(statistics.median(r[clock].get(phase, 0.0) for r in rounds), 3)
                    for phase in rounds[0][clock]}
            for clock in rounds[0]}


NAMES = ("flamegraph", *(f"flamegraph --type {kind}" for kind in TYPES),
         "perf -g via kubectl exec")


def rows(result: dict[str, Any]) -> list[list[str]]:
    """Rows for the report: tool, time beyond the recording (median, each round), named
    share, and the pod's CPU seconds after the recording (read, kernel symbols, unwinding)."""
    table = []
    for name in NAMES:
        if name not in result:
            continue
        entry = result[name]
        cpu = (entry.get("phases_median") or {}).get("cpu_s") or {}
        after = sum(value for phase, value in cpu.items() if phase not in ("prepare", "perf"))
        table.append([name, f"{entry['beyond_recording_s']:.2f} s",
                      " ".join(f"{value:.2f}" for value in entry["rounds_s"]),
                      f"{entry['named_share_percent']} %" if "named_share_percent" in entry
                      else "-",
                      f"perf {cpu.get('perf', 0):.2f} + after {after:.2f} s" if cpu else "-"])
    return table
