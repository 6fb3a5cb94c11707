"""Applications this project did not write, as their distribution ships and runs them: Debian's
nginx (stripped, a master and its workers, as uid 10001), under load from a client in the same
pod. What a user meets first: the oldest process is the master, which does no work; the toolset
says where the work is; the worker's graph is named from what the stripped binary exports.

The measured numbers go to ~/.cache/sidecar-debug/flamegraph-runtimes.json (docs/techniques.md
quotes them)."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.runtime import podman_pod
from tests.runtime.podman_pod import PlayedPod
from tests.runtime.test_flamegraph_runtimes import save, self_weights

pytestmark = [pytest.mark.runtime, pytest.mark.timeout(900)]

# A client that keeps nginx busy: one kept-alive connection, requests back to back (one line:
# podman's YAML reader takes no multi-line string; the pod restarts it until nginx listens).
LOAD = ("import http.client as h, time; time.sleep(2); "
        "c = h.HTTPConnection('127.0.0.1', 8080, timeout=5); "
        "[(c.request('GET', '/'), c.getresponse().read()) for _ in iter(int, 1)]")
# nginx-light is stripped: its exported ngx_* functions (.dynsym, for dynamic modules) are
# named, its static ones are not (82.5 and 85.2 % named in two runs of 2026-12-06, ~50 samples
# each; docs/techniques.md), and the summary says so and what would name them (Debian's
# debuginfod has its debug file).
NGINX_NAMED = 0.75


@pytest.fixture(scope="module")
def nginx_pod(runtime_images: None, pod_workdir: Path) -> Iterator[PlayedPod]:
    pod = podman_pod.sample_pod("nginx", podman_pod.unique("rt-nginx"))
    pod["spec"]["containers"].append({
        "name": "load", "image": podman_pod.sample_image("python"),
        "command": ["python3", "-c", LOAD]})
    injected = podman_pod.inject(pod, "full", None, podman_pod.TOOLSET_IMAGE)
    with podman_pod.played(injected, pod_workdir) as played:
        yield played


def processes(pod: PlayedPod) -> list[tuple[int, int, str, str]]:
    """(pid, ppid, user, command line) of the pod's processes, from the toolset."""
    listing = pod.exec("ps", "-eo", "pid=,ppid=,user:12=,args=", check=True).stdout
    rows = [line.split(None, 3) for line in listing.strip().splitlines()]
    return [(int(pid), int(ppid), user, args) for pid, ppid, user, args in rows]


def test_debian_nginx_master_points_to_its_worker_and_the_worker_is_named(
        nginx_pod: PlayedPod) -> None:
    deadline = time.monotonic() + 120  # the app starts once the sidecar is ready
    while not any(args.startswith("nginx: worker") for *_, args in processes(nginx_pod)):
        assert time.monotonic() < deadline, processes(nginx_pod)
        time.sleep(0.5)
    time.sleep(3)  # the client's first requests
    rows = processes(nginx_pod)
    [master] = [pid for pid, _, _, args in rows if args.startswith("nginx: master")]
    workers = [pid for pid, ppid, _, args in rows if ppid == master]
    assert len(workers) == 2, rows
    assert {user for pid, _, user, _ in rows if pid in [master, *workers]} == {"10001"}, rows
    # The master: (almost) no samples, and the line that says which worker did the work.
    idle = nginx_pod.exec("flamegraph", "--seconds", "3", "--name", "^nginx: master",
                          "--out", "/tmp/fg-master", timeout=300)
    said = idle.stdout + idle.stderr
    match = re.search(rf"PID {master} used [0-9.]+ s of CPU while recording, its child "
                      rf"processes [0-9.]+ s \(PID (\d+) \(nginx\) [0-9.]+ s.*\): the work is "
                      r"in them; pass --pid (\d+)", said)
    assert match and match.group(1) == match.group(2), said
    busiest = int(match.group(1))
    assert busiest in workers
    # The worker it named: its graph, named from nginx's exported functions, glibc's symbol
    # tables and the kernel's.
    out = "/tmp/fg-worker"
    result = nginx_pod.exec("flamegraph", "--seconds", "5", "--pid", str(busiest),
                            "--out", out, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    meta = json.loads(nginx_pod.exec("cat", f"{out}/meta.json", check=True).stdout)
    folded = nginx_pod.exec("cat", f"{out}/stacks.folded", check=True).stdout
    save("nginx", {key: meta.get(key) for key in (
        "named_share", "mean_depth", "samples", "technique", "unwinding", "warnings")})
    assert meta["named_share"] >= NGINX_NAMED, (meta, folded[:3000])
    # main -> ngx_master_process_cycle -> ngx_spawn_process -> (the static
    # ngx_worker_process_cycle: [nginx+0x...]) -> ngx_process_events_and_timers -> ...
    for exported in ("ngx_master_process_cycle", "ngx_spawn_process",
                     "ngx_process_events_and_timers"):
        assert exported in folded, (exported, folded[:3000])
    if meta["named_share"] < 0.9:  # only nginx's static functions go unnamed, and it says so
        [missing] = [w for w in meta["warnings"] if "unnamed" in w]
        assert re.fullmatch(r"\d+ % of the frames are unnamed, in nginx \d+ % of the frames: "
                            r"no symbol table here names them; .*debuginfod.*", missing), missing
    weights = self_weights(folded)
    assert sum(weights.values()) == meta["samples"], meta
