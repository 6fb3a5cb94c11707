"""The matrix section of `make bench` (issue 23 item 9): the numbers of docs/techniques.md's
table (runtime x profile x entry, named share), from the same code as the e2e test
(tests/e2e/matrix.py, run by tests/e2e/test_matrix_e2e.py): the full one-node cluster, the chart
installed with the results service, every runtime sample as uid 10001 in a pod per profile.

Needs root and the full cluster: run it under the heavy lock. Starts its own full cluster
(stopped after), or with --reuse-cluster uses the one `scripts/cluster.sh up` started."""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import e2e
from tests.e2e import matrix

Log = Callable[[str], None]


def measure(log: Log, *, reuse: bool = False, runtimes: tuple[str, ...] = matrix.RUNTIMES,
            seconds: int = 3) -> dict[str, Any]:
    if os.geteuid() != 0:
        return {"skipped": "the full cluster needs root"}
    from tests.e2e import conftest

    with e2e.bench_cluster("full", log, reuse) as cluster, \
            tempfile.TemporaryDirectory(prefix="sidecar-debug-matrix-") as tmp:
        for image in (conftest.WEBHOOK_IMAGE, conftest.TOOLSET_IMAGE,
                      *matrix.sample_images(runtimes)):
            cluster.load_image(image)
        with conftest.results_volume(cluster):
            conftest.install_chart(cluster, conftest.RELEASE, conftest.RELEASE_NAMESPACE,
                                   "--set", "results.enabled=true",
                                   "--set", "controller.intervalSeconds=5")
            namespace = f"matrix-{uuid.uuid4().hex[:6]}"
            try:
                conftest.wait_for_webhook_ready(cluster, conftest.RELEASE_NAMESPACE)
                matrix.prepare_namespace(cluster, namespace, matrix.PROFILES)
                cells = matrix.run(cluster, namespace, Path(tmp), runtimes=runtimes,
                                   seconds=seconds, log=log)
            finally:
                cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
                cluster.helm("uninstall", conftest.RELEASE, "-n", conftest.RELEASE_NAMESPACE,
                             "--wait", check=False)
    return {"seconds": seconds, "app_cpu_limit": matrix.APP_CPU, "cells": matrix.as_json(cells)}


def table(result: dict[str, Any]) -> list[list[Any]]:
    """Rows: runtime, profile, then per entry the named share (or the refusal's exit code)."""
    if "skipped" in result:
        return [[result["skipped"], "", "", "", ""]]
    cells = {(c["runtime"], c["profile"], c["entry"]): c for c in result["cells"]}
    rows = []
    for runtime in dict.fromkeys(c["runtime"] for c in result["cells"]):
        for profile in matrix.PROFILES:
            row: list[Any] = [runtime, profile]
            for entry in matrix.ENTRIES:
                cell = cells.get((runtime, profile, entry))
                if cell is None:
                    row.append("-")
                elif cell["named_share"] is not None:
                    row.append(f"{100 * cell['named_share']:.1f} % ({cell['samples']})")
                else:
                    row.append(f"exit {cell['code']}" if cell["code"] else cell["error"][:40])
            rows.append(row)
    return rows

