"""bench/render.py at a tiny scale: the synthetic profile is what it says, the section runs and
reports its table and target (no timing assertions)."""

from __future__ import annotations

from bench import render, report
from webhook.stacks import folded


def test_the_synthetic_profile_has_distinct_shared_prefix_stacks() -> None:
    stacks = folded.parse(render.synthetic_folded(2000))
    assert len(stacks) == 2000
    assert all(stack[:3] == ("node", "node::Start", "uv_run") and 8 <= len(stack) <= 60
               for stack in stacks)
    assert any("[unknown]" in stack for stack in stacks)


def test_the_render_section_reports_a_target() -> None:
    results = {"render": render.render_speed(500, rounds=1, browser=False, hostile_mb=0.2)}
    speed = results["render"]
    assert speed["stacks"] == 500 and speed["render_cpu_ms"] >= 0 and speed["page_mb"] > 0
    rows = report.targets(results)
    assert [row["target"].split(" MB ")[-1] for row in rows] == [
        "flame graph page of 500 stacks (folded text -> HTML, CPU)",
        "evented, distinct deep stacks (CPU, traced peak)",
        "evented, two deep stacks (CPU, traced peak)"]
    text = report.render({**results, "targets": rows})
    assert "6. Flame graph renderer: 500 stacks" in text and "Hostile inputs" in text
    assert speed["hostile"][1]["outcome"] == "3 stacks"  # the deep stack, with f1 or f2 on top
