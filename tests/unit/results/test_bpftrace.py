"""bpftrace's printed map folded (webhook.results.bpftrace): the entries the toolset's
`bpftrace-profile` recording prints, read in linear time (the old patterns took time quadratic
in a frame's length), within caps; fuzzed: only FoldedError escapes, within a time and memory
budget per input."""

from __future__ import annotations

import time

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tests.unit.input_budget import within_budget
from webhook.results.bpftrace import collapse_bpftrace
from webhook.stacks import folded

# As bpftrace 0.17 prints `@[kstack, ustack, comm] = count()` (kernel frames with offsets,
# user frames as addresses where it cannot name them, perf-mode module suffixes).
PRINTED = """Attaching 2 probes...


@[
    finish_task_switch.isra.0+157
    __schedule+786
    schedule+93
    do_nanosleep+117
,{sp}
    0x7f3b2c0e47fa
    0x55d0c0a1b2c3 fib+31 (/app/fib)
, sleep]: 3
@[,{sp}
    0x55d0c0a1b2c3
    main+0x1f
, node]: 40
@[
    schedule+5
, , swapper/0]: 9
@count[node]: 43
""".format(sp=" ")  # bpftrace ends those lines with a space


def test_the_printed_map_folds_root_first_with_kernel_frames_marked() -> None:
    assert collapse_bpftrace(PRINTED) == {
        ("sleep", "fib", "0x7f3b2c0e47fa", "do_nanosleep_[k]", "schedule_[k]", "__schedule_[k]",
         "finish_task_switch.isra.0_[k]"): 3,
        ("node", "main", "0x55d0c0a1b2c3"): 40,
        ("swapper/0", "schedule_[k]"): 9,
    }


@pytest.mark.parametrize("length", [40_000, 1 << 20])
def test_a_long_frame_costs_linear_time(length: int) -> None:
    """The issue's frames: 2.77 s of CPU at 40,000 characters before (white space)."""
    for frame in (" " * length + "fib", "a" + " " * length + "(x)", "+1" * (length // 2)):
        text = f"@[\n{frame}\n, node]: 1\n"
        with within_budget(0.5, 16 + 4 * length / (1 << 20), frame[:20]):
            collapse_bpftrace(text)
        with pytest.raises(folded.TooLarge, match="more than a frame of 100"):
            collapse_bpftrace(text, folded.Limits(max_frame=100))


def test_caps() -> None:
    with pytest.raises(folded.TooLarge, match="more than 3 distinct stacks"):
        collapse_bpftrace("".join(f"@[\n    f{i}\n, a]: 1\n" for i in range(4)),
                          folded.Limits(max_stacks=3))
    with pytest.raises(folded.TooLarge, match="more than 10 samples"):
        collapse_bpftrace("@[\n    f\n, a]: 11\n", folded.Limits(max_samples=10))
    with pytest.raises(folded.TooLarge, match="count of more than"):
        collapse_bpftrace("@[\n    f\n, a]: " + "9" * 5000 + "\n")
    with pytest.raises(folded.TooLarge, match="an entry of more than 22 lines"):
        collapse_bpftrace("@[\n" + "    f\n" * 30 + ", a]: 1\n", folded.Limits(max_depth=10))
    with pytest.raises(folded.TooLarge, match="time budget"):
        collapse_bpftrace("@[\n    f\n, a]: 1\n" * 200, folded.Limits(deadline=time.monotonic()))


ENTRY = st.lists(st.sampled_from(["@[\n", "    fib+12\n", "    0x7f12 f (m)\n", ",\n",
                                   ", node]: 3\n", "@[, \n", ", , x]: 1\n", "\ud800",
                                   " " * 200, "@a[1]: 2\n"]), max_size=30).map("".join)
TOKENS = st.sampled_from(["@[", "@[, ", "@x[", ",", ", ", "]: ", "]:", "1", "99", "0x", "ff",
                          "+", "+0x1f", "(vmlinux)", " ", "    ", "\t", "\n", "\r\n", "fib",
                          "node", ";", "\x0b", "\u2028", "\ud800", "٣", "²", "[unknown]"])


@settings(max_examples=500, deadline=None)
@given(st.lists(TOKENS, max_size=80).map("".join) | ENTRY)
@example("@[\n" + " " * 50_000 + "x\n, node]: 1\n")
@example("@[" + "]: 1" * 10_000)
@example("@[\n    f\n, a]: " + "9" * 5000 + "\n")
@example("@[\n    f\ud800\n, a]: 1\n")  # JSON's "\ud800": UTF-8 cannot store it
def test_fuzz(text: str) -> None:
    limits = folded.Limits(max_frame=16 << 10, max_stacks=1000, max_samples=10**9)
    with within_budget(1.0, 32, text):
        try:
            stacks = collapse_bpftrace(text, limits)
        except folded.FoldedError as error:
            assert str(error) and "\n" not in str(error)
            return
    for frames, count in stacks.items():
        assert frames and all(frames) and count > 0
        assert not any(";" in frame or "\n" in frame for frame in frames), frames
        # What is stored reads back as the same stacks.
    assert folded.parse(folded.format_stacks(stacks)) == stacks
