"""The recorded AdmissionReview fixtures still describe what the real apiserver sends.

Re-records every case into a temporary folder (tests/fixtures/admission/record.py) and compares
the parts the webhook relies on with the committed files.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.cluster import Cluster
from tests.fixtures.admission.record import record

pytestmark = pytest.mark.cluster

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "admission"


def _shape(review: dict[str, Any]) -> dict[str, Any]:
    request = review["request"]
    meta = request["object"]["metadata"]
    return {
        "apiVersion": review["apiVersion"],
        "kind": review["kind"],
        "operation": request["operation"],
        "dryRun": request.get("dryRun"),
        "namespace": request.get("namespace"),
        "username": request["userInfo"]["username"],
        "object.namespace": meta.get("namespace"),
        "object.name": meta.get("name"),
        "object.generateName": meta.get("generateName"),
        "owned": bool(meta.get("ownerReferences")),
    }


def test_recorded_fixtures_match_a_fresh_recording(lite_cluster: Cluster,
                                                   tmp_path: Path) -> None:
    fresh = record(lite_cluster, tmp_path)
    committed = sorted(FIXTURES.glob("*.json"))
    assert committed, "no fixtures committed: run tests/fixtures/admission/record.py"
    assert {path.stem for path in committed} == set(fresh)
    for case, path in fresh.items():
        new = json.loads(path.read_text())
        old = json.loads((FIXTURES / f"{case}.json").read_text())
        assert _shape(new) == _shape(old), case
    replicaset = json.loads(fresh["deployment-replicaset-pod"].read_text())
    assert replicaset["request"]["userInfo"]["username"] == (
        "system:serviceaccount:kube-system:replicaset-controller")
    assert json.loads(fresh["dry-run"].read_text())["request"]["dryRun"] is True
