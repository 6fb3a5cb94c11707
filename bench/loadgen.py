"""`wrk` (the HTTP load generator, Debian package wrk) POSTing an AdmissionReview over TLS.

A Lua script sets method, headers and body; its `done()` prints the latency percentiles and
the error counts as one JSON line, which is what the benchmark reads (wrk's own table rounds
and omits p99.9)."""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

SCRIPT = r"""
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local f = assert(io.open("%(body)s", "rb"))
wrk.body = f:read("*a")
f:close()

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    '\nBENCH-JSON {"requests":%%d,"duration_us":%%d,"bytes":%%d,' ..
    '"p50_us":%%d,"p90_us":%%d,"p99_us":%%d,"p999_us":%%d,"mean_us":%%.1f,"max_us":%%d,' ..
    '"errors":{"connect":%%d,"read":%%d,"write":%%d,"status":%%d,"timeout":%%d}}\n',
    summary.requests, summary.duration, summary.bytes,
    latency:percentile(50), latency:percentile(90), latency:percentile(99),
    latency:percentile(99.9), latency.mean, latency.max,
    e.connect, e.read, e.write, e.status, e.timeout))
end
"""


@dataclass
class LoadResult:
    concurrency: int
    requests: int
    seconds: float
    rps: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    p999_ms: float
    mean_ms: float
    max_ms: float
    errors: dict[str, int]

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def wrk_available() -> bool:
    return shutil.which("wrk") is not None


def parse(output: str, concurrency: int) -> LoadResult:
    line = next((ln for ln in output.splitlines() if ln.startswith("BENCH-JSON ")), None)
    if line is None:
        raise RuntimeError(f"wrk printed no summary:\n{output[-2000:]}")
    data = json.loads(line.removeprefix("BENCH-JSON "))
    seconds = data["duration_us"] / 1e6
    return LoadResult(
        concurrency=concurrency,
        requests=data["requests"],
        seconds=round(seconds, 3),
        rps=round(data["requests"] / seconds, 1) if seconds else 0.0,
        p50_ms=data["p50_us"] / 1000,
        p90_ms=data["p90_us"] / 1000,
        p99_ms=data["p99_us"] / 1000,
        p999_ms=data["p999_us"] / 1000,
        mean_ms=round(data["mean_us"] / 1000, 3),
        max_ms=data["max_us"] / 1000,
        errors=data["errors"],
    )


def run(url: str, body: bytes, concurrency: int, seconds: float, *,
        threads: int | None = None, timeout_s: int = 10) -> LoadResult:
    """`concurrency` keep-alive connections (wrk -c) for `seconds`, from up to 2 wrk threads."""
    threads = threads or min(2, concurrency)
    with tempfile.TemporaryDirectory(prefix="bench-wrk-") as tmp:
        body_file = Path(tmp) / "body.json"
        body_file.write_bytes(body)
        script = Path(tmp) / "post.lua"
        script.write_text(SCRIPT % {"body": str(body_file)})
        command = ["wrk", f"-t{threads}", f"-c{concurrency}", f"-d{max(1, round(seconds))}s",
                   f"--timeout={timeout_s}s", "--latency", "-s", str(script), url]
        done = subprocess.run(command, capture_output=True, text=True,
                              timeout=seconds + timeout_s + 30, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"wrk exited {done.returncode}: {done.stderr[-2000:]}")
    return parse(done.stdout, concurrency)
