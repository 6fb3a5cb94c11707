"""A run's meta.json as the page reads it: unreadable metadata becomes a warning on the page, and
whatever a pod's meta.json holds only annotates the page."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.stacks.test_detect_fuzz import JSON, STACKS
from webhook import render
from webhook.render.model import read_meta


def test_meta_that_is_not_an_object_becomes_a_warning() -> None:
    assert read_meta(b'{"technique": "perf"}') == {"technique": "perf"}
    assert read_meta(None) == {}
    assert read_meta(b"[1]")["warnings"] == ["meta.json is ignored: not a JSON object"]
    assert read_meta(b"{")["warnings"][0].startswith("meta.json is ignored: not JSON")


META_KEYS = st.sampled_from(["technique", "type", "seconds", "duration", "frequency",
                             "samples", "namedShare", "runtime", "unwinding", "notes",
                             "warnings", "summary", "started", "pod", "exitCode", "unit"])


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(META_KEYS, JSON, max_size=8))
def test_a_pods_meta_json_only_annotates_the_page(meta: dict[str, Any]) -> None:
    """meta.json comes from the pod's /tmp like stacks.folded: whatever its fields hold, the
    page and the CLI summary are made (the stacks decide the graph)."""
    data = json.dumps(meta).encode()
    profile = render.Profile(STACKS, meta=read_meta(data), title="t", name="n")
    assert render.render(profile).html.startswith("<!doctype html>")
    assert all("\n" not in line for line in render.summary(profile, hottest=3))
