"""`python -m bench` (`make bench`): handler cost, scaling, memory and pod creation on the real
apiserver, the flame graph renderer's speed and the toolset's flame graph recording
(podman); prints a table and writes
bench/results/<name>-<time>.json. docs/performance.md
explains every number and the commands that reproduce them."""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench import guard_core, handler, loadgen, report, scaling, servers, stub_api
from bench.servers import ServerSpec
from webhook.config import Settings

SECTIONS = ("handler", "guard", "workers", "slow-clients", "scaling", "guard-core", "memory",
            "e2e", "render", "flamegraph", "flamegraph-demo", "fleet", "results-isolation",
            "results-store", "matrix")
WORKER_CONFIGS = (
    "sync:2,gthread:2x4,balanced:1x4,balanced:2x1,balanced:2x2,balanced:2x4,balanced:2x8,"
    "balanced:3x4,balanced:4x2"
)


def parse_config(text: str) -> ServerSpec:
    """`sync:N`, `gthread:WxT` (stock gunicorn) or `balanced:WxT` (the served worker)."""
    kind, _, count = text.partition(":")
    if kind == "sync":
        return ServerSpec(worker_class="sync", workers=int(count), threads=1)
    if kind not in ("gthread", "balanced"):
        raise argparse.ArgumentTypeError(f"unknown worker class {kind!r} in {text!r}")
    workers, _, threads = count.partition("x")
    return ServerSpec(worker_class=kind, workers=int(workers), threads=int(threads or 1))


def served_configs(text: str, env: dict[str, str]) -> list[ServerSpec]:
    """The comma-separated configs of --worker-configs/--slow-configs, each served with `env`."""
    specs = [parse_config(c.strip()) for c in text.split(",") if c.strip()]
    for spec in specs:
        spec.env = env
    return specs


def _log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def arguments(argv: list[str] | None) -> argparse.Namespace:
    defaults = Settings()
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--sections", default=",".join(SECTIONS),
                        help=f"comma-separated, from {', '.join(SECTIONS)} (default: all)")
    parser.add_argument("--seconds", type=float, default=10, help="wrk duration per point")
    parser.add_argument("--concurrency", default="1,8,32")
    parser.add_argument("--shapes", default="typical,large")
    parser.add_argument("--handler-rounds", type=int, default=1,
                        help="handler section: interleaved rounds per point (median reported)")
    parser.add_argument("--workers", type=int, default=defaults.workers)
    parser.add_argument("--threads", type=int, default=defaults.threads)
    parser.add_argument("--worker-configs", default=WORKER_CONFIGS,
                        help="for the workers section: sync:N or gthread:WxT, comma-separated")
    parser.add_argument("--worker-rounds", type=int, default=3,
                        help="interleaved rounds over the worker configs (median reported)")
    parser.add_argument("--worker-seconds", type=float, default=5,
                        help="wrk duration per worker-config point (0: --seconds)")
    parser.add_argument("--slow-clients", default="0,64",
                        help="for the slow-clients section: how many slow connections")
    parser.add_argument("--slow-configs", default="balanced:2x4,gthread:2x4",
                        help="for the slow-clients section: the served worker configs")
    parser.add_argument("--memory-reviews", type=int, default=100_000)
    parser.add_argument("--pods", type=int, default=300, help="pod creations per namespace")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds of creations")
    parser.add_argument("--e2e-modes", default="null,fixed-patch,webhook,rbac-cached,rbac-cold")
    parser.add_argument("--render-stacks", type=int, default=50_000,
                        help="render section: distinct stacks of the synthetic profile")
    parser.add_argument("--flamegraph-rounds", type=int, default=3,
                        help="flamegraph section: interleaved rounds (podman, root)")
    parser.add_argument("--fleet-pods", default="100,1000,5000",
                        help="fleet section: injected pods (toolsets polling) per point")
    parser.add_argument("--fleet-seconds", type=float, default=60,
                        help="fleet section: steady-state seconds measured per point")
    parser.add_argument("--store-points", default="10000:10:100,100000:10:1000,100000:1000:10000",
                        help="results-store section: RUNS:NAMESPACES:PODS per point")
    parser.add_argument("--matrix-seconds", type=int, default=3,
                        help="matrix section: recording per cell (full cluster, root)")
    parser.add_argument("--no-cluster", action="store_true",
                        help="skip the sections that need Kubernetes (e2e, fleet, matrix)")
    parser.add_argument("--reuse-cluster", action="store_true",
                        help="reuse (and leave running) the bench's own lite cluster; matrix: the "
                        "full cluster `scripts/cluster.sh up` started")
    parser.add_argument("--quick", action="store_true",
                        help="a fast pass: 2 s points, 5k reviews for memory, 30 pods")
    parser.add_argument("--out", type=Path, default=report.RESULTS_DIR)
    parser.add_argument("--name", default="bench")
    args = parser.parse_args(argv)
    if args.quick:
        args.seconds = min(args.seconds, 2)
        args.memory_reviews = min(args.memory_reviews, 5000)
        args.pods, args.rounds = min(args.pods, 30), 1
        args.worker_configs = "sync:2,gthread:2x4"
        args.worker_rounds, args.worker_seconds = 1, 0
        args.slow_configs = "balanced:2x4"
        args.render_stacks = min(args.render_stacks, 5000)
        args.flamegraph_rounds = 1
        args.fleet_pods, args.fleet_seconds = "100", 20
        args.store_points = "10000:10:100"
    return args


@contextlib.contextmanager
def _cluster(needed: bool, reuse: bool) -> Iterator[Any]:
    if not needed:
        yield None
        return
    from bench import e2e

    with e2e.lite_cluster(_log, reuse=reuse) as cluster:
        yield cluster


def run(args: argparse.Namespace) -> dict[str, Any]:
    sections = [s.strip() for s in args.sections.split(",") if s.strip()]
    unknown = set(sections) - set(SECTIONS)
    if unknown:
        raise SystemExit(f"unknown section(s) {sorted(unknown)}; known: {', '.join(SECTIONS)}")
    served = {"handler", "guard", "workers", "slow-clients", "memory"} & set(sections)
    if served and not loadgen.wrk_available():
        raise SystemExit("wrk is missing: apt-get install wrk (scripts/setup.sh does)")
    for needs_cluster in ("e2e", "fleet", "matrix"):
        if args.no_cluster and needs_cluster in sections:
            sections.remove(needs_cluster)
            _log(f"--no-cluster: skipping the {needs_cluster} section")
    results: dict[str, Any] = {"meta": report.metadata(), "arguments": vars(args) | {
        "out": str(args.out)}}
    concurrencies = [int(c) for c in args.concurrency.split(",")]
    shapes = [s.strip() for s in args.shapes.split(",")]

    def save() -> Path:
        results["targets"] = report.targets(results)
        results["meta"]["load_average_end"] = list(servers.load_average())
        return report.write(results, args.out, args.name)

    with tempfile.TemporaryDirectory(prefix="sidecar-debug-bench-") as tmp, \
            stub_api.stub_api(Path(tmp)) as stub_kubeconfig, \
            _cluster(bool({"e2e", "fleet"} & set(sections)), args.reuse_cluster) as cluster:
        workdir = Path(tmp)
        _, cert, key = servers.make_certs(workdir / "certs")
        # The served sections ask the stand-in API (cached answers, as in a cluster).
        env = {"KUBECONFIG": str(stub_kubeconfig)}
        spec = ServerSpec(workers=args.workers, threads=args.threads, env=env)
        if "handler" in sections:
            results["handler"] = handler.handler_cost(
                cert, key, workdir, spec, shapes=shapes, concurrencies=concurrencies,
                seconds=args.seconds, rounds=args.handler_rounds, log=_log)
            save()
        if "guard" in sections:
            results["guard"] = handler.guard_cost(
                cert, key, workdir, spec, shapes=shapes, concurrencies=concurrencies,
                seconds=args.seconds, rounds=args.handler_rounds, log=_log)
            save()
        if "workers" in sections:
            results["workers"] = handler.worker_choice(
                cert, key, workdir, served_configs(args.worker_configs, env), shape="typical",
                concurrencies=[c for c in concurrencies if c > 1] or concurrencies,
                seconds=args.worker_seconds or args.seconds, rounds=args.worker_rounds,
                log=_log)
            save()
        if "slow-clients" in sections:
            results["slow_clients"] = handler.slow_clients(
                cert, key, workdir, served_configs(args.slow_configs, env),
                counts=[int(c) for c in args.slow_clients.split(",")],
                concurrency=8, seconds=args.seconds, shape="typical", log=_log)
            save()
        if "scaling" in sections:
            results["scaling"] = scaling.scaling(budget_s=0.1 if args.quick else 1.0)
            _log(f"scaling fit: {results['scaling']['fit']}")
            save()
        if "guard-core" in sections:
            results["guard_core"] = guard_core.guard_cost(budget_s=0.1 if args.quick else 1.0)
            save()
        if "memory" in sections:
            results["memory"] = handler.memory(
                cert, key, workdir, spec, reviews=args.memory_reviews,
                chunk_seconds=min(10.0, args.seconds * 2), shape="typical", log=_log)
            save()
        if "e2e" in sections and cluster is not None:
            from bench import e2e

            results["e2e"] = e2e.pod_creation(
                cluster, workdir, modes=[m.strip() for m in args.e2e_modes.split(",")],
                pods_per_run=args.pods, rounds=args.rounds, workers=args.workers,
                threads=args.threads, log=_log)
        if "fleet" in sections and cluster is not None:
            from bench import fleet
            from webhook.results.planner import IDLE_POLL_SECONDS

            # The agents' first polls spread over the longest wait a plan asks for.
            results["fleet"] = fleet.fleet(
                cluster, workdir, [int(n) for n in args.fleet_pods.split(",")],
                steady_seconds=args.fleet_seconds, poll=float(IDLE_POLL_SECONDS), log=_log)
            save()
        if "render" in sections:
            from bench import render

            _log(f"render: {args.render_stacks} stacks")
            results["render"] = render.render_speed(args.render_stacks,
                                                    rounds=1 if args.quick else 5)
            save()
        if "flamegraph" in sections:
            from bench import flamegraph

            results["flamegraph"] = flamegraph.flamegraph_speed(rounds=args.flamegraph_rounds,
                                                                log=_log)
            save()
        if "flamegraph-demo" in sections:
            from bench import flamegraph_demo

            results["flamegraph-demo"] = flamegraph_demo.flamegraph_demo_speed(
                rounds=args.flamegraph_rounds, log=_log)
            save()
        if "results-isolation" in sections:
            from bench import results_isolation

            _log("results-isolation: a calm namespace's plans and pages under hostile pushes")
            results["results-isolation"] = results_isolation.measure()
            _log(f"results-isolation: {results['results-isolation']['baseline']} alone, "
                 f"{results['results-isolation']['attacked']} under attack")
            save()
        if "results-store" in sections:
            from bench import results_store

            results["results-store"] = results_store.measure(
                args.store_points, requests=20 if args.quick else 100, log=_log)
            save()
        if "matrix" in sections:
            from bench import matrix

            _log("matrix: every runtime sample x perf, bcc, full x injected, scheduled, "
                 "attached on the full cluster")
            results["matrix"] = matrix.measure(_log, reuse=args.reuse_cluster,
                                               seconds=args.matrix_seconds)
            save()
        results["meta"]["stub_api_calls"] = stub_api.calls()
    results["json"] = str(save())
    return results


def main(argv: list[str] | None = None) -> int:
    results = run(arguments(argv))
    print(report.render(results))
    print(f"\nresults: {results['json']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
