"""speedscope's JSON as the results page's download writes it: what a user downloads must open in
speedscope, with the samples the run recorded."""

from __future__ import annotations

import json

from tests.unit.stacks.test_folded import FOLDED
from webhook.stacks import folded, speedscope


def test_speedscope_weights_add_up_to_the_samples() -> None:
    stacks = folded.parse(FOLDED)
    document = json.loads(speedscope.encode(stacks, "web-1 perf"))
    profile = document["profiles"][0]
    assert document["$schema"] == speedscope.SCHEMA
    assert profile["type"] == "sampled" and sum(profile["weights"]) == 100
    frames = [frame["name"] for frame in document["shared"]["frames"]]
    first = [frames[index] for index in profile["samples"][0]]
    assert first == ["main", "run", "compute", "fib"]  # root first, as speedscope reads them
    assert profile["endValue"] == 100
