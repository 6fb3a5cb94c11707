"""Folded stacks, the stored form of every run: parsed with repeats summed and bad lines named,
written heaviest first, the hottest functions, the differential form."""

from __future__ import annotations

import pytest

from webhook.stacks import folded

FOLDED = """\
main;run;compute;fib 60
main;run;compute 10
main;run;io_wait 25
main;gc 5
"""


def test_parse_sums_repeats_and_names_bad_lines() -> None:
    stacks = folded.parse(FOLDED + "main;gc 3\n\n# comment\n")
    assert stacks[("main", "gc")] == 8
    assert folded.total(stacks) == 103
    with pytest.raises(folded.FoldedError, match="line 2"):
        folded.parse("a;b 1\nnot a count\n")
    with pytest.raises(folded.FoldedError, match="empty frame"):
        folded.parse("a;;b 1\n")


def test_format_is_heaviest_first_and_round_trips() -> None:
    stacks = folded.parse(FOLDED)
    text = folded.format_stacks(stacks)
    assert text.splitlines()[0] == "main;run;compute;fib 60"
    assert folded.parse(text) == stacks


def test_hottest_counts_self_samples() -> None:
    assert folded.hottest(folded.parse(FOLDED), 2) == [("fib", 60), ("io_wait", 25)]


def test_diff_normalizes_before_to_after_total() -> None:
    before = folded.parse("a;b 10\na;c 10\n")
    after = folded.parse("a;b 30\na;d 10\n")
    pairs = folded.diff(before, after)
    assert pairs[("a", "b")] == (20, 30)  # before scaled x2 (20 -> 40 samples)
    assert pairs[("a", "c")] == (20, 0)
    assert pairs[("a", "d")] == (0, 10)
    assert folded.diff(before, after, normalize=False)[("a", "b")] == (10, 30)
    assert folded.parse_diff(folded.format_diff(pairs)) == pairs
