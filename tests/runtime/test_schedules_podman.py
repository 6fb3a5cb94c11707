"""The scheduled and triggered techniques in a real toolset container beside a Node app
(podman): `trap` keeps the seconds before a CPU threshold and names the hot function, and the
schedules' bpftrace-profile recording (the results agent's, as it runs for a plan) samples only
the pod's own tasks (its PID namespace), and the service's collapser folds it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.runtime import podman_pod
from tests.runtime.podman_pod import PlayedPod
from webhook.results.bpftrace import collapse_bpftrace
from webhook.stacks import folded

pytestmark = [pytest.mark.runtime, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def node_pod(runtime_images: None, pod_workdir: Path) -> Iterator[PlayedPod]:
    pod = podman_pod.sample_pod("node", podman_pod.unique("rt-sched"),
                                annotations={"sidecar-debug.io/runtime": "node"})
    injected = podman_pod.inject(pod, "full", "node", podman_pod.TOOLSET_IMAGE)
    with podman_pod.played(injected, pod_workdir) as played:
        played.wait_for_log(r'"rate"')
        yield played


def test_trap_keeps_the_seconds_before_the_threshold(node_pod: PlayedPod) -> None:
    result = node_pod.exec("trap", "--cpu", "5", "--seconds-before", "3", "--seconds-after",
                           "1", "--timeout", "120", "--out", "/tmp/trap-test", timeout=300)
    assert result.returncode == 0, result.stderr
    assert "triggered: cpu" in result.stderr
    trigger = json.loads(node_pod.exec("cat", "/tmp/trap-test/trigger.json", check=True).stdout)
    assert trigger["metric"] == "cpu" and trigger["value"] >= 5
    text = node_pod.exec("cat", "/tmp/trap-test/stacks.folded", check=True).stdout
    stacks = folded.parse(text)
    hottest, samples = folded.hottest(stacks, 1)[0]
    assert "fibonacci" in hottest and samples / folded.total(stacks) > 0.5, text[:2000]
    # 4 s at 99 Hz at most (a busy machine gives fewer): the ring buffer was cut to the window
    assert folded.total(stacks) <= 4 * 99 + 10


def test_bpftrace_profile_samples_only_the_pods_tasks(node_pod: PlayedPod) -> None:
    result = node_pod.exec("results-agent", "record", "bpftrace-profile", "--seconds", "3",
                           "--frequency", "49", timeout=300)
    assert result.returncode == 0, result.stderr
    stacks = collapse_bpftrace(result.stdout)
    assert folded.total(stacks) > 0, result.stdout[:2000]
    # The host's other processes run too, but only this pod's PID namespace is sampled.
    assert {frames[0] for frames in stacks} <= {"node", "toolset-entrypo", "sh", "sleep",
                                                "results-agent"}
    assert "node" in {frames[0] for frames in stacks}
