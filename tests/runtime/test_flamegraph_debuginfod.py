"""A stripped C binary named through a real debuginfod server (issue 23 item 5): in a podman
pod, the app runs samples/c's hot.c built -O2 and stripped (no .symtab), as uid 10001; Debian's
debuginfod serves its debug file on the pod's loopback; the webhook's setting debuginfodUrls
gives the toolset DEBUGINFOD_URLS. Without the server the binary's functions are
[hot+0xSTART]; with it they are named, and the second recording reads the toolset's cache.

The measured numbers go to ~/.cache/sidecar-debug/flamegraph-runtimes.json (docs/techniques.md
quotes them)."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from tests.runtime import podman_pod
from tests.runtime.test_flamegraph_runtimes import record, save, self_weights

pytestmark = [pytest.mark.runtime, pytest.mark.timeout(600)]

PORT = 8002
APP = ("--name", "^/usr/local/bin/hot")  # not the server, the pod's other process
METRICS = ("import urllib.request as u; "
           f"print(u.urlopen('http://127.0.0.1:{PORT}/metrics', timeout=5).read().decode())")


def test_a_stripped_binary_is_named_through_debuginfod(runtime_images: None,
                                                       pod_workdir: Path) -> None:
    pod = podman_pod.sample_pod("c-stripped", podman_pod.unique("rt-debuginfod"))
    app = pod["spec"]["containers"][0]
    app["securityContext"] = {"runAsUser": 10001, "runAsGroup": 10001}
    server = {"name": "debuginfod", "image": app["image"],
              "command": ["debuginfod", "-F", "-p", str(PORT), "-d", ":memory:", "-t", "0",
                          "-g", "0", "/srv/debuginfo"],
              "securityContext": {"runAsUser": 10001, "runAsGroup": 10001}}
    pod["spec"]["containers"].append(server)
    injected = podman_pod.inject(pod, "full", None, podman_pod.TOOLSET_IMAGE, {
        "SIDECAR_DEBUG_DEBUGINFOD_URLS": f"http://127.0.0.1:{PORT}",
        "SIDECAR_DEBUG_DEBUGINFOD_TIMEOUT_SECONDS": "20"})
    toolset_env = {e["name"]: e.get("value") for e in injected["spec"]["containers"][0]["env"]}
    assert toolset_env["DEBUGINFOD_URLS"] == f"http://127.0.0.1:{PORT}"
    with podman_pod.played(injected, pod_workdir) as played:
        played.wait_for_log(r'"rate"', timeout=120)
        # Asked before its scan is done, the server would say 404 (and the toolset would not
        # ask again for 10 minutes): wait until it has indexed the debug file.
        deadline = time.monotonic() + 60
        while 'scanned_files_total{source="file"} 1' not in played.exec(
                "python3", "-c", METRICS).stdout:
            assert time.monotonic() < deadline, played.logs("debuginfod")
            time.sleep(1)
        # Without the server: the stripped binary's functions are its name and their starts.
        unnamed = played.exec("env", "-u", "DEBUGINFOD_URLS", "flamegraph", "--seconds", "5",
                              *APP, "--out", "/tmp/fg-stripped", timeout=300)
        assert unnamed.returncode == 0, unnamed.stdout + unnamed.stderr
        meta = json.loads(played.exec("cat", "/tmp/fg-stripped/meta.json", check=True).stdout)
        folded = played.exec("cat", "/tmp/fg-stripped/stacks.folded", check=True).stdout
        leaves = self_weights(folded)
        # fib_recursive calling itself: a run of one hidden function is one [hot] frame.
        assert re.fullmatch(r"\[hot(\+0x[0-9a-f]+)?\]",
                            max(leaves, key=lambda leaf: leaves[leaf])), leaves
        assert "fib_recursive" not in folded and "run_round" not in folded
        assert "hot" not in meta["debug_symbols"], meta
        without = meta["named_share"]
        # The summary says whose symbols are missing and what would name them.
        [missing] = [w for w in meta["warnings"] if "unnamed" in w]
        assert re.fullmatch(r"\d+ % of the frames are unnamed, in hot \d+ %.* of the frames: "
                            r"no symbol table here names them; with the chart's "
                            r"toolset\.debuginfod\.urls .*", missing), missing
        assert f"warning: {missing}" in unnamed.stdout, unnamed.stdout
        # With it: named, from debuginfod, then from the cache.
        fetched = record(played, *APP, out="/tmp/fg-debuginfod")
        assert fetched.meta["debug_symbols"]["hot"] == "debuginfod", fetched.meta
        weights = self_weights(fetched.folded)
        assert max(weights, key=lambda leaf: weights[leaf]) == "fib_recursive", weights
        assert "run_round" in fetched.folded and "main" in fetched.folded
        assert fetched.meta["named_share"] >= 0.95, fetched.meta
        assert not any("debuginfod" in w or "unnamed" in w
                       for w in fetched.meta["warnings"]), fetched.meta
        cached = record(played, *APP, out="/tmp/fg-cached")
        assert cached.meta["debug_symbols"]["hot"] == "debuginfod (cached)", cached.meta
        assert cached.meta["named_share"] >= 0.95, cached.meta
        assert played.exec("stat", "-c", "%u", f"/proc/{fetched.meta['pid']}").stdout.strip() \
            == "10001"
        save("c-stripped", {"named_share_without_debuginfod": without,
                            "named_share": fetched.meta["named_share"],
                            "named_share_cached": cached.meta["named_share"],
                            "unwind_seconds": fetched.meta["unwind_seconds"],
                            "unwind_seconds_cached": cached.meta["unwind_seconds"],
                            "duration": fetched.meta["duration"]})
