"""The flamegraph section of `make bench` (issue 18, item 5): on the demo's Node sample in a
podman pod (injected `full` toolset, as the runtime tests play it), side by side with perf run
directly in the same sidecar:
- time from command to stacks.folded + meta.json, beyond the recording itself;
- the app's throughput while each one samples at 99 Hz, against the same app left alone
  (rounds interleaved: baseline, ours, perf -g, perf --call-graph dwarf; medians reported);
- the named share each one gives (perf's own `[unknown]` frames counted in `perf script`).
Needs podman and root (run it under the cluster lock: it plays a pod)."""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.runtime import podman_pod

# perf run directly, as a user would without this project: record, then perf script (what
# any flame graph tool reads). PID is the app's. --no-inline: perf's addr2line child dies on
# Debian's libnode ("could not read first record") and takes perf script down with SIGPIPE.
DIRECT = {
    "perf -g": "perf record -q -F {hz} -g -p {pid} -o /tmp/bench.data -- sleep {s} && "
               "perf script --no-inline -i /tmp/bench.data > /tmp/bench.txt 2>/dev/null",
    "perf dwarf": "perf record -q -F {hz} --call-graph dwarf -p {pid} -o /tmp/bench.data -- "
                  "sleep {s} && perf script --no-inline -i /tmp/bench.data > /tmp/bench.txt 2>/dev/null",
}
# Frame lines of `perf script`, all and unnamed, counted in the pod.
COUNT_FRAMES = (r"grep -cE '^\s+[0-9a-f]+ ' /tmp/bench.txt; "
                r"grep -cE '^\s+[0-9a-f]+ \[unknown\]' /tmp/bench.txt; rm -f /tmp/bench.*")


def _rates(pod: podman_pod.PlayedPod, since: float, until: float) -> list[float]:
    values = []
    for line in pod.logs().splitlines():
        if line.startswith("{"):
            record = json.loads(line)
            if since * 1000 <= record["time"] <= until * 1000:
                values.append(float(record["rate"]))
    return values


def _named_share_of_perf_script(pod: podman_pod.PlayedPod) -> float:
    counts = pod.exec("sh", "-c", COUNT_FRAMES).stdout.split()
    frames, unknown = (int(n) for n in counts[:2])
    return (frames - unknown) / frames if frames else 0.0


def _app_pid(pod: podman_pod.PlayedPod) -> str:
    out = pod.exec("pgrep", "-o", "-f", "node /app/app.js", check=True).stdout
    return out.split()[0]


def flamegraph_speed(rounds: int = 3, seconds: float = 10, frequency: int = 99,
                     log: Callable[[str], None] = print) -> dict[str, Any]:
    reason = podman_pod.podman_available()
    if reason:
        return {"skipped": reason}
    podman_pod.build_images("toolset", "sample-node")
    workdir = Path("/tmp/sidecar-debug-bench-pods")
    workdir.mkdir(exist_ok=True)
    pod = podman_pod.sample_pod("node", podman_pod.unique("bench-node"),
                                annotations={"sidecar-debug.io/runtime": "node"})
    injected = podman_pod.inject(pod, "full", "node", podman_pod.TOOLSET_IMAGE)
    runs: dict[str, list[dict[str, float]]] = {"baseline": [], "flamegraph": [],
                                               **{name: [] for name in DIRECT}}
    with podman_pod.played(injected, workdir) as played:
        played.wait_for_log(r'"rate"')
        pid = _app_pid(played)
        time.sleep(5)  # JIT warm-up
        for round_index in range(rounds):
            log(f"flamegraph round {round_index + 1}/{rounds}")
            start = time.time()
            time.sleep(seconds)
            runs["baseline"].append({"rate": statistics.median(
                _rates(played, start + 1, time.time()) or [0.0])})
            start = time.time()
            result = played.exec("flamegraph", "--seconds", f"{seconds:g}", "--frequency",
                                 str(frequency), "--out", f"/tmp/bench-{round_index}",
                                 timeout=seconds + 300, check=True)
            wall = time.time() - start
            meta = json.loads(played.exec("cat", f"/tmp/bench-{round_index}/meta.json",
                                          check=True).stdout)
            runs["flamegraph"].append({
                "beyond_recording_s": wall - seconds,
                "unwind_s": float(meta.get("unwind_seconds", 0)),
                "rate": statistics.median(_rates(played, start + 1, start + seconds) or [0.0]),
                "named_share": float(meta["named_share"]),
                "mean_depth": float(meta["mean_depth"])})
            del result
            for name, command in DIRECT.items():
                start = time.time()
                played.exec("sh", "-c", command.format(hz=frequency, pid=pid, s=f"{seconds:g}"),
                            timeout=seconds + 600, check=True)
                wall = time.time() - start
                runs[name].append({
                    "beyond_recording_s": wall - seconds,
                    "rate": statistics.median(_rates(played, start + 1, start + seconds)
                                              or [0.0]),
                    "named_share": _named_share_of_perf_script(played)})
    base = statistics.median(r["rate"] for r in runs["baseline"])
    summary: dict[str, Any] = {"app": "samples/node (fibonacci, demo pod)",
                               "seconds": seconds, "frequency": frequency, "rounds": rounds,
                               "baseline_rate": base}
    for name in ("flamegraph", *DIRECT):
        entries = runs[name]
        rate = statistics.median(r["rate"] for r in entries)
        summary[name] = {
            "beyond_recording_s": round(statistics.median(
                r["beyond_recording_s"] for r in entries), 2),
            "overhead_percent": round(100 * (base - rate) / base, 1) if base else None,
            "named_share": round(statistics.median(r["named_share"] for r in entries), 3),
            **({"unwind_s": round(statistics.median(r["unwind_s"] for r in entries), 2)}
               if name == "flamegraph" else {}),
        }
    summary["runs"] = runs
    return summary


def table(result: dict[str, Any]) -> list[list[Any]]:
    """Rows for the report: tool, time beyond the recording, overhead, named share."""
    if "skipped" in result:
        return [["skipped", result["skipped"], "", ""]]
    return [[name, f"{result[name]['beyond_recording_s']:.2f} s",
             f"{result[name]['overhead_percent']:.1f} %",
             f"{100 * result[name]['named_share']:.1f} %"]
            for name in ("flamegraph", *DIRECT)]
