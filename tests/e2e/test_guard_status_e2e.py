"""Issue 24 item 4 on the full cluster: the guard reviews `pods/status` (failurePolicy Fail), so
every status write of the kubelet for a pod in a guarded namespace goes through it. Those writes
change no annotation of ours and must pass, or no pod there would ever be Ready. (The refusals
through `pods/status` against the real apiserver: tests/e2e/test_namespace_name_e2e.py.)"""

from __future__ import annotations

import json

import pytest

from tests.cluster.cluster import Cluster
from tests.e2e.conftest import app_container, wait_until
from tests.e2e.test_guard_e2e import guarded  # noqa: F401 - the fixture

pytestmark = [pytest.mark.cluster]


def test_the_kubelets_status_writes_pass_the_guard(
        full_cluster: Cluster, guarded: str) -> None:  # noqa: F811 - the fixture
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "ready", "namespace": guarded,
                        "annotations": {"sidecar-debug.io/inject": "false"}},
           "spec": {"containers": [app_container()]}}
    full_cluster.kubectl("create", "-f", "-", input=json.dumps(pod))

    def ready() -> bool:
        stored = full_cluster.kubectl_json("get", "pod", "ready", "-n", guarded)
        conditions = (stored.get("status") or {}).get("conditions") or []
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)

    wait_until(ready, 180, "the kubelet to report the pod Ready through the guard")
    configuration = full_cluster.kubectl_json(
        "get", "validatingwebhookconfiguration", "-l", "app.kubernetes.io/instance")["items"]
    rules = [rule for item in configuration for hook in item["webhooks"]
             if hook["name"] == "guard.sidecar-debug.io" for rule in hook["rules"]]
    assert any("pods/status" in rule["resources"] for rule in rules), rules
