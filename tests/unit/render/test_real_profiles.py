"""Profiles the real tools wrote (tests/fixtures/profiles/README.md says how) read and summed
up as a person sees them: py-spy's raw folded output with its empty idle stack, py-spy's
speedscope file in seconds, Go's CPU (nanoseconds) and heap (bytes) profiles, perf script
collapsed by stackcollapse-perf.pl. Golden files: tests/golden/profiles/NAME.txt
(`--update-golden` rewrites them)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from webhook import render
from webhook.render.page import page_data
from webhook.stacks import detect

ROOT = Path(__file__).resolve().parents[3]
FIXTURES = ROOT / "tests" / "fixtures" / "profiles"
GOLDEN = ROOT / "tests" / "golden" / "profiles"
FILES = ["py-spy.raw.folded", "py-spy.speedscope.json", "go-cpu.pb.gz", "go-heap.pb.gz",
         "perf-go.folded"]


def _described(name: str) -> str:
    loaded = detect.load((FIXTURES / name).read_bytes())
    profile = render.Profile(loaded.stacks, unit=loaded.unit, title=name)
    lines = [f"# {name}, by tests/unit/render/test_real_profiles.py --update-golden",
             f"format: {loaded.format}", f"unit: {loaded.unit}",
             *(f"warning: {warning}" for warning in loaded.warnings),
             *render.summary(profile, hottest=5), "stacks:"]
    ordered = sorted(loaded.stacks.items(), key=lambda item: (-item[1], item[0]))
    lines += [f"  {';'.join(stack)} {count}" for stack, count in ordered]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("name", FILES)
def test_real_tools_files_match_their_golden_summary(name: str, update_golden: bool) -> None:
    text = _described(name)
    golden = GOLDEN / f"{name}.txt"
    if update_golden:
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(text)
    assert text == golden.read_text(), f"{name} reads differently; if intended, --update-golden"


def test_py_spy_raw_counts_its_idle_samples_under_the_root() -> None:
    loaded = detect.load((FIXTURES / "py-spy.raw.folded").read_bytes())
    assert loaded.format == "folded" and loaded.unit == "samples"
    assert loaded.stacks[()] == 3  # the line ` 3`
    assert sum(loaded.stacks.values()) == 205  # py-spy: "Samples: 205"
    data = page_data(render.Profile(loaded.stacks))
    assert 0 in data["depths"] and sum(data["counts"]) == 205


def test_py_spy_speedscope_shows_seconds_not_microseconds() -> None:
    loaded = detect.load((FIXTURES / "py-spy.speedscope.json").read_bytes())
    profile = render.Profile(loaded.stacks, unit=loaded.unit)
    assert loaded.unit == "\u00b5s"
    assert "total:         470 ms" in render.summary(profile)


@pytest.mark.skipif(shutil.which("go") is None, reason="go is not installed (golang-go)")
def test_go_cpu_total_is_what_go_tool_pprof_says() -> None:
    """`go tool pprof -top`'s "N% of TOTAL total" and our total, in the same unit."""
    top = subprocess.run(["go", "tool", "pprof", "-top", "-nodecount=1",
                          str(FIXTURES / "go-cpu.pb.gz")], capture_output=True, text=True,
                         check=True, timeout=120).stdout
    found = re.search(r"of ([0-9.]+)(ms|s) total", top)
    assert found, top
    loaded = detect.load((FIXTURES / "go-cpu.pb.gz").read_bytes())
    summary = render.summary(render.Profile(loaded.stacks, unit=loaded.unit))
    assert f"total:         {found.group(1)} {found.group(2)}" in summary


def test_go_heap_is_in_bytes() -> None:
    loaded = detect.load((FIXTURES / "go-heap.pb.gz").read_bytes())
    assert loaded.unit == "bytes"  # inuse_space, pprof's default (the last type)
    summary = render.summary(render.Profile(loaded.stacks, unit=loaded.unit))
    assert re.search(r"total: +1\.0[0-9] MiB", "\n".join(summary)), summary
