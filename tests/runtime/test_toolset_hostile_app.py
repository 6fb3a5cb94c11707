"""The sidecar runs as root and shares /tmp and /var/run/lttng with the app: an app that plants
links, FIFOs and swapped directories there must not get anything written or run as root in
the sidecar (issue 12, item 1), and a binary path of its choosing must not become bpftrace
program text (item 5). A real pod: a hostile app container run as root, the toolset scripts
run in the sidecar, and the sidecar's own files are checked afterwards."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.runtime import podman_pod
from tests.runtime.podman_pod import PlayedPod

pytestmark = [pytest.mark.runtime, pytest.mark.timeout(900)]

SITE = "/usr/lib/python3/dist-packages"  # the sidecar's Python reads every .pth there
PTH = "sidecar_debug_owned.pth"
MARKER = "/var/tmp/sidecar-debug-owned"  # what the .pth writes when the sidecar runs Python
VICTIM = "/etc/debian_version"  # an existing file of the sidecar's
HOSTILE_DIR = '/opt/x"y{z};'  # a directory name bpftrace's probe syntax cannot carry
NEWLINE_DIR = "/opt/nl\nuprobe:{a}"  # a newline would end the probe and start another

# The app's main process plants, then becomes the app (exec keeps its PID, the perf map's):
# - /tmp/perf-PID.map -> ../usr/lib/python3/dist-packages/x.pth, dangling in the sidecar,
#   while the same link inside the app's own root finds the app's payload (the case);
# - /tmp/sidecar-debug -> the sidecar's site-packages (the scripts' default output folder);
# - /tmp/lt-out/trace.txt -> an existing sidecar file, /tmp/lt-out/trace -> site-packages;
# - /tmp/lt-fifo/trace.txt as a FIFO.
# (No script starts with a newline: podman 4.3's kube play cannot read such a string back.)
PLANT = f"""\
set -e
mkdir -p {SITE}
echo 'import os; open("{MARKER}", "w").write(str(os.getuid()))' > {SITE}/{PTH}
ln -s ../usr/lib/python3/dist-packages/{PTH} /tmp/perf-$$.map
ln -s {SITE} /tmp/sidecar-debug
mkdir -p /tmp/lt-out /tmp/lt-fifo
ln -s {VICTIM} /tmp/lt-out/trace.txt
ln -s {SITE} /tmp/lt-out/trace
mkfifo /tmp/lt-fifo/trace.txt
echo planted $$
exec python3 /app/app.py
"""

HOSTILE_BINARY = f"""\
mkdir -p '{HOSTILE_DIR}' '{NEWLINE_DIR}'
cp /usr/local/bin/fib '{HOSTILE_DIR}/fib'
cp /usr/local/bin/fib '{NEWLINE_DIR}/fib-nl'
'{NEWLINE_DIR}/fib-nl' >/dev/null &
exec '{HOSTILE_DIR}/fib'
"""


@pytest.fixture(scope="module")
def hostile_pod(runtime_images: None, pod_workdir: Path) -> Iterator[PlayedPod]:
    name = podman_pod.unique("rt-hostile")
    # Half a core of its own CPU time: perf samples it in 2 s however loaded the machine is
    # (logging alone, it got no sample in 2 s on a busy CI machine).
    pod = podman_pod.sample_pod("python", name,
                                env={"TICK_SECONDS": "0.01", "WORK_SECONDS": "0.01"})
    app = pod["spec"]["containers"][0]
    app["command"] = ["/bin/sh", "-c", PLANT]
    app["securityContext"] = {"runAsUser": 0}
    pod["spec"]["containers"].append({
        "name": "bin", "image": podman_pod.sample_image("c"),
        "command": ["/bin/sh", "-c", HOSTILE_BINARY], "securityContext": {"runAsUser": 0}})
    injected = podman_pod.inject(pod, "full", "python", podman_pod.TOOLSET_IMAGE)
    with podman_pod.played(injected, pod_workdir) as played:
        played.wait_for_log(r"tick \d+")
        played.wait_for_log(r"fib\(\d+\) = \d+", container="bin")
        yield played


def sidecar_file(pod: PlayedPod, path: str) -> str | None:
    result = pod.exec("cat", path)
    return result.stdout if result.returncode == 0 else None


def site_packages(pod: PlayedPod) -> set[str]:
    return set(pod.exec("ls", "-A", SITE, check=True).stdout.split())


@pytest.fixture(scope="module")
def baseline(hostile_pod: PlayedPod) -> tuple[set[str], str]:
    """The sidecar's site-packages and victim file before any script ran."""
    victim = sidecar_file(hostile_pod, VICTIM)
    assert victim
    return site_packages(hostile_pod), victim


def assert_sidecar_untouched(pod: PlayedPod, baseline: tuple[set[str], str]) -> None:
    added = site_packages(pod) - baseline[0]
    assert not added, f"written into the sidecar's site-packages: {sorted(added)}"
    assert sidecar_file(pod, MARKER) is None, "the app's code ran as root in the sidecar"
    assert sidecar_file(pod, VICTIM) == baseline[1], f"{VICTIM} of the sidecar was overwritten"


def app_pid(pod: PlayedPod) -> str:
    match = re.search(r"planted (\d+)", pod.logs())
    assert match, pod.logs()[-2000:]
    return match.group(1)


def sidecar_logs(pod: PlayedPod) -> str:
    return subprocess.run(["podman", "logs", pod.container(podman_pod.SIDECAR)],
                          capture_output=True, text=True, timeout=60).stderr


def test_flamegraph_writes_nothing_through_the_apps_links(
    hostile_pod: PlayedPod, baseline: tuple[set[str], str]
) -> None:
    # perf records only: the map is read by the toolset without following links, so the
    # planted link is ignored (and said so), never opened as root.
    linked = hostile_pod.exec("flamegraph", "--name", "app.py", "--technique", "perf",
                              "--seconds", "2", "--out", "/tmp/fg-1", timeout=300)
    assert_sidecar_untouched(hostile_pod, baseline)
    assert linked.returncode == 0, linked.stderr
    assert f"/tmp/perf-{app_pid(hostile_pod)}.map is a symbolic link" in linked.stdout
    # Any Python run of the sidecar afterwards (doctor is one) runs nothing of the app's.
    hostile_pod.exec("doctor", "--json", timeout=300)
    assert_sidecar_untouched(hostile_pod, baseline)

    # The default output folder is the app's link: refused.
    default_out = hostile_pod.exec("flamegraph", "--name", "app.py", "--seconds", "2",
                                   timeout=300)
    assert default_out.returncode == 4, default_out.stderr
    assert "cannot use the output folder /tmp/sidecar-debug/flamegraph-" in default_out.stderr
    assert "/tmp/sidecar-debug is a symbolic link in a volume the app can write" in (
        default_out.stderr)
    assert_sidecar_untouched(hostile_pod, baseline)
    # A clean folder works, and the results are readable by root only.
    clean = hostile_pod.exec("flamegraph", "--name", "app.py", "--seconds", "2", "--frequency",
                             "999", "--out", "/tmp/fg-clean", timeout=300, check=True)
    assert "hottest functions" in clean.stdout
    listing = hostile_pod.exec("ls", "-l", "/tmp/fg-clean", check=True).stdout
    for name in ("stacks.folded", "meta.json", "summary.txt"):
        assert re.search(rf"^-rw------- .* {name}$", listing, re.MULTILINE), listing
    # The private work directories are removed (the entrypoint's own files stay).
    leftovers = hostile_pod.exec("find", "/var/lib/sidecar-debug", "-mindepth", "1", "-type", "d",
                                 check=True).stdout
    assert not leftovers.strip(), leftovers


def test_lttng_trace_replaces_planted_links_and_fifos(
    hostile_pod: PlayedPod, baseline: tuple[set[str], str]
) -> None:
    result = hostile_pod.exec("lttng-trace", "--seconds", "2", "--out", "/tmp/lt-out",
                              timeout=300)
    assert_sidecar_untouched(hostile_pod, baseline)
    assert result.returncode == 0, result.stderr
    text = hostile_pod.exec("cat", "/tmp/lt-out/trace.txt", container="app", check=True).stdout
    assert "lttng_python:event" in text
    assert hostile_pod.exec("test", "-d", "/tmp/lt-out/trace", "-a", "!", "-L",
                            "/tmp/lt-out/trace", container="app").returncode == 0
    # A FIFO where the text goes would block a plain open() forever.
    fifo = hostile_pod.exec("lttng-trace", "--seconds", "1", "--out", "/tmp/lt-fifo", timeout=120)
    assert fifo.returncode == 0, fifo.stderr
    assert_sidecar_untouched(hostile_pod, baseline)


def test_the_session_daemon_does_not_follow_links_planted_in_var_run_lttng(
    hostile_pod: PlayedPod, baseline: tuple[set[str], str]
) -> None:
    """lttng-sessiond (root) rewrites agent.port and binds its sockets in /var/run/lttng when
    the sidecar restarts: whatever the app put there while it was down must not redirect it.
    (Planted while the daemon runs, the links would be removed by the daemon's own cleanup.)"""
    plant = (f"rm -rf /var/run/lttng/agent.port /var/run/lttng/ustconsumerd64 && "
             f"ln -s {VICTIM} /var/run/lttng/agent.port && "
             f"ln -s {SITE} /var/run/lttng/ustconsumerd64")
    sidecar = hostile_pod.container(podman_pod.SIDECAR)
    subprocess.run(["podman", "stop", "-t", "10", sidecar], check=True, capture_output=True,
                   timeout=120)
    hostile_pod.exec("/bin/sh", "-c", plant, container="app", check=True)
    subprocess.run(["podman", "start", sidecar], check=True, capture_output=True, timeout=120)
    ready = hostile_pod.exec("toolset-entrypoint", "--wait-ready", "--timeout", "30")
    assert ready.returncode == 0, sidecar_logs(hostile_pod)[-2000:]
    assert_sidecar_untouched(hostile_pod, baseline)
    logs = sidecar_logs(hostile_pod)
    assert "removed /var/run/lttng/agent.port (symbolic link)" in logs, logs[-2000:]
    assert "removed /var/run/lttng/ustconsumerd64 (symbolic link)" in logs, logs[-2000:]


def test_uprobe_trace_refuses_a_hostile_binary_path(hostile_pod: PlayedPod) -> None:
    refused = hostile_pod.exec("uprobe-trace", "--name", "fib$", "--function", "fib",
                               "--seconds", "2", timeout=120)
    assert refused.returncode == 4, refused.stderr
    assert "contains '\"'" in refused.stderr and "hard-link" in refused.stderr
    newline = hostile_pod.exec("uprobe-trace", "--name", "fib-nl$", "--function", "fib",
                               "--seconds", "2", timeout=120)
    assert newline.returncode == 4, newline.stderr
    assert "contains '\\n'" in newline.stderr, newline.stderr
    # Nothing of the app's path reaches the terminal raw: the newline is shown escaped.
    assert "uprobe:{a}" not in newline.stderr.replace("\\nuprobe:{a}", "")
    # Asked to print the program instead of running it: still refused, nothing printed.
    printed = hostile_pod.exec("uprobe-trace", "--name", "fib-nl$", "--function", "fib",
                               "--print-program")
    assert printed.returncode == 4 and printed.stdout == "", printed.stdout
    hostile_function = hostile_pod.exec("uprobe-trace", "--name", "fib$", "--function",
                                        'fib { system("id") } BEGIN {', "--seconds", "1")
    assert hostile_function.returncode == 2
    assert "--offset" in hostile_function.stderr
    # The way out the message names: a hard link with a plain name, same inode.
    hostile_pod.exec("ln", f"{HOSTILE_DIR}/fib", "/opt/fib-plain", container="bin", check=True)
    traced = hostile_pod.exec("uprobe-trace", "--name", "fib$", "--binary", "/opt/fib-plain",
                              "--function", "fib", "--args", "int", "--seconds", "2",
                              "--max-events", "5", timeout=300, check=True)
    assert len(re.findall(r"^fib\(\d+\)$", traced.stdout, re.MULTILINE)) == 5, traced.stdout
