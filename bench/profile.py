"""`python -m bench.profile`: where a served review spends its CPU.

Starts `sidecar-debug serve` (the defaults, as the handler section does), drives it with wrk and
samples its workers with py-spy, counting only the thread that holds the GIL (CPU, not waiting;
`pip install py-spy`, which needs ptrace, i.e. root). Writes the collapsed stacks (flamegraph.pl
or speedscope input) to bench/results/ and prints the inclusive share of the top frames."""

from __future__ import annotations

import argparse
import collections
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench import loadgen, pods, report, servers, stub_api
from bench.servers import ServerSpec


def summarise(collapsed: str, top: int = 30) -> list[tuple[str, float]]:
    """Inclusive share of samples per frame (function + file), counted once per stack."""
    inclusive: collections.Counter[str] = collections.Counter()
    total = 0
    for line in collapsed.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        total += count
        frames = {frame.split(" (")[0] + " (" + frame.split(" (")[-1].split(":")[0] + ")"
                  if " (" in frame else frame for frame in stack.split(";")}
        for frame in frames:
            inclusive[frame] += count
    return [(frame, round(100 * n / total, 1)) for frame, n in inclusive.most_common(top)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.profile")
    parser.add_argument("--shape", default="typical")
    parser.add_argument("--seconds", type=float, default=15)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--rate", type=int, default=200, help="py-spy samples per second")
    parser.add_argument("--kubeconfig", help="a real cluster for the policy gate's look-ups "
                        "(default: bench.stub_api)")
    args = parser.parse_args(argv)
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    body = pods.review_body(args.shape)
    with tempfile.TemporaryDirectory(prefix="bench-profile-") as tmp, \
            stub_api.stub_api(Path(tmp)) as stub_kubeconfig:
        workdir = Path(tmp)
        env = {"KUBECONFIG": args.kubeconfig or str(stub_kubeconfig)}
        _, cert, key = servers.make_certs(workdir / "certs")
        with servers.serve(ServerSpec(env=env), cert, key, workdir) as server:
            loadgen.run(server.url + "/mutate", body, args.concurrency, 2)
            out = workdir / "stacks.txt"
            load = threading.Thread(target=loadgen.run, args=(
                server.url + "/mutate", body, args.concurrency, args.seconds + 2))
            load.start()
            time.sleep(1)
            subprocess.run([py_spy, "record", "--pid", str(server.master_pid), "--subprocesses",
                            "--rate", str(args.rate), "--duration", str(int(args.seconds)),
                            "--format", "raw", "--output", str(out), "--nonblocking", "--gil"],
                           check=True, capture_output=True)
            load.join()
            collapsed = out.read_text()
    report.RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    target = report.RESULTS_DIR / f"profile-{args.shape}-{time.strftime('%Y%m%dT%H%M%SZ')}.txt"
    target.write_text(collapsed)
    for frame, share in summarise(collapsed):
        print(f"{share:5.1f}%  {frame}")
    print(f"\ncollapsed stacks: {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
