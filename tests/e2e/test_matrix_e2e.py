"""Issue 23 item 2: the matrix on the real one-node cluster (tests/e2e/matrix.py says how each
entry runs). Every runtime sample x `perf`, `bcc`, `full` x injected, scheduled, attached, the
app as uid 10001 in every cell. A cell that records asserts its named share (the runtime's
threshold, as the podman runtime tests assert it) and its hot function; a cell that cannot
record fails with the one line docs/techniques.md gives for it, checked against the page.

The measured numbers go to ~/.cache/sidecar-debug/matrix.json (docs/techniques.md quotes the
`make bench` section that runs the same code: bench/matrix.py)."""

from __future__ import annotations

import json
import os
import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster.cluster import Cluster
from tests.e2e import matrix
from tests.e2e.conftest import REPO, build_images, upgrade_release
from tests.runtime.test_flamegraph_runtimes import CASES, RESULTS

pytestmark = [pytest.mark.cluster, pytest.mark.full, pytest.mark.timeout(1200)]

TECHNIQUES = REPO / "docs" / "techniques.md"


@pytest.fixture
def matrix_namespace(full_cluster: Cluster, chart_release: str,
                     local_volume: str) -> Iterator[str]:
    if os.environ.get("SIDECAR_DEBUG_SKIP_IMAGE_BUILD") != "1":
        build_images("samples")
    for image in matrix.sample_images(matrix.RUNTIMES):
        full_cluster.load_image(image)
    upgrade_release(full_cluster, chart_release, "--set", "results.enabled=true",
                    "--set", "controller.intervalSeconds=5")
    namespace = f"matrix-{uuid.uuid4().hex[:6]}"
    matrix.prepare_namespace(full_cluster, namespace, matrix.PROFILES)
    try:
        yield namespace
    finally:
        full_cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
        upgrade_release(full_cluster, chart_release, check=False)


def matrix_section() -> str:
    """docs/techniques.md's matrix section: the lines a refusing cell prints are in it, each
    between double backticks with `PID N` for the app's PID."""
    text = TECHNIQUES.read_text()
    start = text.index("### The matrix")
    return text[start:text.index("\n### ", start + 1)]


def documented(line: str, section: str) -> bool:
    return f"`` {re.sub(r'PID [0-9]+', 'PID N', line)} ``" in section


def test_matrix_of_runtimes_profiles_and_entries(full_cluster: Cluster, matrix_namespace: str,
                                                 tmp_path: Path) -> None:
    cells = matrix.run(full_cluster, matrix_namespace, tmp_path)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "matrix.json").write_text(json.dumps(matrix.as_json(cells), indent=2))
    print("\n" + "\n".join(f"{c.key:32} {c.named_share or 0:6.3f} {c.samples:5d} "
                           f"{c.seconds:5.0f}s {c.code} {c.hottest[:50]} {c.error[:160]}"
                           for c in cells))
    expected = {(r, p, e) for r in matrix.RUNTIMES for p in matrix.PROFILES
                for e in matrix.ENTRIES}
    assert {(c.runtime, c.profile, c.entry) for c in cells} == expected
    section = matrix_section()
    failures = []
    for cell in cells:
        case = CASES[cell.runtime]
        if cell.entry == "attached":
            # Kubernetes 1.20: no securityContext on an ephemeral container, whatever the
            # profile asked: root without CAP_SYS_PTRACE, and an app of uid 10001.
            if cell.code != 4 or not documented(cell.error, section):
                failures.append(f"{cell.key}: exit {cell.code}, {cell.error!r}\n{cell.detail}")
        elif matrix.ungrantable(cell.profile):
            # The node's runtime cannot grant the profile: the toolset never starts, and the
            # kubelet says why (the pod's Events); documented for the profile.
            if matrix.CANNOT_APPLY_CAPS not in cell.error:
                failures.append(f"{cell.key}: {matrix.ungrantable(cell.profile)} cannot be "
                                f"granted here, yet: {cell.error!r} {cell.named_share}")
        elif (cell.named_share is None or cell.named_share < case.named
              or case.hot not in cell.hottest):
            failures.append(f"{cell.key}: named {cell.named_share}, hottest {cell.hottest!r}, "
                            f"{cell.error}\n{cell.detail[-3000:]}")
    assert not failures, "\n\n".join(failures)
