"""One reading of a pod's facts (webhook.wire.pod)."""

from __future__ import annotations

from typing import Any

import pytest

from webhook.wire.pod import PodView, named, service_account


@pytest.mark.parametrize(("spec", "account"), [
    ({"serviceAccountName": "web", "serviceAccount": "old"}, "web"),
    ({"serviceAccount": "old"}, "old"),  # the legacy field, as the API still accepts it
    ({"serviceAccountName": "", "serviceAccount": "old"}, "old"),
    ({}, "default"),
    ({"serviceAccountName": 5}, "default"),
    (None, "default"),
])
def test_service_account(spec: Any, account: str) -> None:
    assert service_account({"spec": spec}) == account
    assert PodView.of({"spec": spec}).service_account == account


def test_the_view_reads_what_has_the_shape_and_nothing_else() -> None:
    pod = {
        "metadata": {"name": "web", "namespace": "dev", "labels": {"app": "web"},
                     "annotations": None},
        "spec": {
            "initContainers": [{"name": "init"}, None],
            "containers": [{"name": "app"}, {"image": "nameless"}],
            "ephemeralContainers": [{"name": "debug"}],
            "volumes": [{"name": "tmp", "emptyDir": {}}, "junk"],
        },
    }
    view = PodView.of(pod)
    assert (view.name, view.namespace, view.labels, view.annotations) == (
        "web", "dev", {"app": "web"}, {})
    assert [c["name"] for c in view.containers()] == ["init", "app", "debug"]
    assert [c["name"] for c in view.containers(("containers",))] == ["app"]
    assert view.volumes == {"tmp": {"name": "tmp", "emptyDir": {}}}
    assert PodView.of({"metadata": [], "spec": "x"}) == PodView({}, {})
    assert named("x") == []
