"""pytest fixtures for the real clusters (loaded by tests/conftest.py for every test dir).

- `lite_cluster` (session): etcd + kube-apiserver + kube-controller-manager; ServiceClusterIPs
  are loopback addresses (`lite_cluster.service_cidr`), so a webhook process bound to its
  Service's ClusterIP is what the apiserver calls.
- `full_cluster` (session): one real node (containerd, kubelet, kube-proxy, CNI bridge, DNS).
  Started once per pytest session, whichever test dir asks first.

Both are `tests.cluster.Cluster` objects: `.kubeconfig`, `.kubeconfig_for(user)`,
`.kubectl(*args, user=...)`, `.kubectl_json(...)`, `.helm(...)`, `.apiserver_url`,
`.token_for(user)`, `.users` (admin plus plain users alice, bob, carol without any rights),
`.api_client(user)`, `.load_image(name)` (full only), `.service_cidr`, `.ca_file`,
`.logs_dir`.

Environment:
- SIDECAR_DEBUG_REUSE_CLUSTER=1: use a cluster already started with `scripts/cluster.sh up`
  and leave it running (fast local iterations); otherwise each session starts its own.
- SIDECAR_DEBUG_SKIP_CLUSTER=1: skip cluster tests (machines that cannot run them).
Skips happen only when the machine cannot run a cluster (not root for full); in CI
(CI=true) a missing prerequisite is an error, never a skip.
"""

from __future__ import annotations

import os
from collections.abc import Generator, Iterator
from pathlib import Path

import pluggy
import pytest

from tests.cluster.cluster import Cluster, ClusterError

_failed_with_cluster: set[str] = set()


def _skip_reason(mode: str) -> str | None:
    if os.environ.get("SIDECAR_DEBUG_SKIP_CLUSTER") == "1":
        return "SIDECAR_DEBUG_SKIP_CLUSTER=1"
    if os.geteuid() != 0 and mode == "full":
        return "the full cluster needs root (bridge, iptables, containerd, kubelet)"
    # As root the harness installs what is missing itself (scripts/cluster-deps.sh).
    if (os.geteuid() != 0 and not Path("/usr/bin/etcd").exists()
            and not os.environ.get("KUBEBUILDER_ASSETS")):
        return "etcd missing and not root: run scripts/cluster-deps.sh as root"
    return None


def _cluster(mode: str, request: pytest.FixtureRequest) -> Iterator[Cluster]:
    reason = _skip_reason(mode)
    if reason:
        if os.environ.get("CI") == "true" and "SKIP_CLUSTER" not in reason:
            pytest.fail(f"{mode} cluster cannot start in CI: {reason}", pytrace=False)
        pytest.skip(reason)
    if os.environ.get("SIDECAR_DEBUG_REUSE_CLUSTER") == "1":
        existing = Cluster.attach(mode)
        if existing is not None:
            yield existing
            return
    cluster = Cluster(mode)
    try:
        cluster.up()
    except ClusterError as error:
        pytest.fail(f"{mode} cluster did not start (logs: {cluster.logs_dir}):\n{error}",
                    pytrace=False)
    request.config.stash.setdefault(_logs_key, []).append(str(cluster.logs_dir))
    try:
        yield cluster
    finally:
        if os.environ.get("SIDECAR_DEBUG_REUSE_CLUSTER") != "1":
            cluster.down(quiet=True)


_logs_key = pytest.StashKey[list[str]]()


@pytest.fixture(scope="session")
def lite_cluster(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    yield from _cluster("lite", request)


@pytest.fixture(scope="session")
def full_cluster(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    yield from _cluster("full", request)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None],
) -> Generator[None, pluggy.Result[pytest.TestReport], None]:
    outcome = yield
    report = outcome.get_result()
    if report.failed and {"lite_cluster", "full_cluster"} & set(getattr(item, "fixturenames", ())):
        _failed_with_cluster.add(item.nodeid)
        cluster = item.funcargs.get("full_cluster") if hasattr(item, "funcargs") else None
        if isinstance(cluster, Cluster) and cluster.state.ready:
            try:
                pods = cluster.kubectl("get", "pods", "-A", "-o", "wide", check=False,
                                       timeout=20).stdout
                events = cluster.kubectl("get", "events", "-A", "--sort-by=.lastTimestamp",
                                         check=False, timeout=20).stdout
                report.sections.append(("cluster pods", pods))
                report.sections.append(("cluster events (last 40)",
                                        "\n".join(events.splitlines()[-40:])))
            except Exception as error:  # noqa: BLE001 - diagnostics only
                report.sections.append(("cluster diagnostics", repr(error)))


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, exitstatus: int, config: pytest.Config,
) -> None:
    logs = config.stash.get(_logs_key, [])
    if _failed_with_cluster and logs:
        terminalreporter.write_line(
            f"cluster tests failed; component logs kept in: {', '.join(logs)}")
