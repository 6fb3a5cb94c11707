"""The folded-stack parser reads what pods send (pushed runs, copied-back files): any input is
parsed or refused with one FoldedError line naming the line; no other exception escapes."""

from __future__ import annotations

import re

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from webhook.stacks import MAX_COUNT, MAX_DEPTH, folded

# What the issue found and its relatives: characters str.isdigit accepts but int() refuses
# or reads as another number, integers int() refuses to convert, sums beyond exact JSON.
HOSTILE = [
    ("main;fib ²\n", 1, "expected"),
    ("main;fib 1\nmain;gc ³\n", 2, "expected"),
    ("main;fib ٣\n", 1, "expected"),  # Arabic-Indic three: int() would read 3
    ("main;fib 1" + "0" * 5000 + "\n", 1, "more than"),
    (f"main;fib {MAX_COUNT + 1}\n", 1, "more than"),
    (f"a {MAX_COUNT}\nb 1\n", 2, "samples in all"),
    (f"a {MAX_COUNT}\na 1\n", 2, "samples in all"),
    ("a;" * MAX_DEPTH + "b 1\n", 1, "frames, more than"),
    ("ok 1\n\x0bstill line two 1\nbad\n", 3, "expected"),  # \x0b is not a line break
    ("a 1\r\nb\u2028c 2\r\nd x\r\n", 3, "expected"),
    ("x" * (folded.MAX_LINE + 1) + " 1\n", 1, "longer than"),
    ("a;;b 1\n", 1, "empty frame"),
    (" 1\n", 1, "expected"),
    ("a -1\n", 1, "expected"),
    ("a 1\nb\ud800c 1\n", 2, "lone surrogate"),
    ("a 1.5\n", 1, "expected"),
    ("a +1\n", 1, "expected"),
]


@pytest.mark.parametrize(("text", "line", "why"), HOSTILE)
def test_hostile_input_is_refused_naming_its_line(text: str, line: int, why: str) -> None:
    with pytest.raises(folded.FoldedError) as refused:
        folded.parse(text)
    message = str(refused.value)
    assert message.startswith(f"line {line}: ") and why in message
    assert "\n" not in message and len(message) < 300


def test_diff_parser_refuses_the_same_way() -> None:
    for text, line in (("a 1 ²\n", 1), ("a 1 2\nb 1" + "9" * 5000 + " 1\n", 2),
                       (f"a {MAX_COUNT} 1\na 1 1\n", 2), ("a 1\n", 1)):
        with pytest.raises(folded.FoldedError, match=f"^line {line}: "):
            folded.parse_diff(text)


def test_what_it_accepts_is_unchanged() -> None:
    text = "# comment\n\n  main;fib 60  \r\nmain;fib 2\nmain; spaced frame ;x 0\nmain;gc 007\n"
    assert folded.parse(text) == {("main", "fib"): 62, ("main", "gc"): 7}
    assert folded.parse("main;f\x0bg 3\n") == {("main", "f\x0bg"): 3}
    assert folded.parse(f"a {MAX_COUNT}\n") == {("a",): MAX_COUNT}
    assert folded.parse("a;" * (MAX_DEPTH - 1) + "b 1\n")


def test_non_text_is_refused() -> None:
    with pytest.raises(folded.FoldedError, match="expected text, got bytes"):
        folded.parse(b"a 1\n")  # type: ignore[arg-type]  # bytes on purpose: refused at run time


# Lines assembled from the pieces that break parsers: digits of all kinds, separators,
# whitespace and line breaks of every sort, huge numbers.
PIECES = st.sampled_from([
    "main", "fib", ";", " ", "  ", "\t", "\n", "\r", "\r\n", "\x0b", "\x0c", "\x1c", "\x85",
    "\u2028", "#", "0", "1", "9", "²", "٣", "١٢", "𝟗", "-", "+", ".", "e", "x", "\x00", "\ufeff",
    "9" * 30, "1" + "0" * 4400, "\ud800",
])
TEXT = st.one_of(st.text(max_size=200), st.lists(PIECES, max_size=40).map("".join))


def _check_refusal(error: folded.FoldedError, text: str) -> None:
    message = str(error)
    assert "\n" not in message and "\r" not in message
    match = re.match(r"line (\d+): ", message)
    assert match, message
    assert 1 <= int(match.group(1)) <= text.count("\n") + 1


@settings(max_examples=600, deadline=None)
@given(TEXT)
@example("main;fib ²\n")
def test_fuzz_only_folded_error_escapes_parse(text: str) -> None:
    try:
        stacks = folded.parse(text)
    except folded.FoldedError as error:
        _check_refusal(error, text)
        return
    for frames, count in stacks.items():
        assert frames and all(frames) and 0 < count <= MAX_COUNT
    assert folded.total(stacks) <= MAX_COUNT
    # What it accepted it stores as UTF-8 and reads back as the same stacks.
    text = folded.format_stacks(stacks)
    assert folded.parse(text.encode("utf-8").decode("utf-8")) == stacks


@settings(max_examples=300, deadline=None)
@given(TEXT)
@example("a 1 ²\n")
def test_fuzz_only_folded_error_escapes_parse_diff(text: str) -> None:
    try:
        pairs = folded.parse_diff(text)
    except folded.FoldedError as error:
        _check_refusal(error, text)
        return
    assert folded.parse_diff(folded.format_diff(pairs)) == {
        frames: pair for frames, pair in pairs.items() if any(pair)}
