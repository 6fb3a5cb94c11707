"""Folded stacks, the source of truth of every stored run, and what is computed from them.

One line per distinct stack: frames from the root to the leaf joined by `;`, a space, the number
of samples (`main;compute;fib 37`), as Brendan Gregg's stackcollapse scripts and perf's own
flamegraph report write them. `parse` (what pods push, what the store keeps) is strict about
what it keeps and clear about what it refuses: a line that is not `STACK COUNT` names its line
number.

The differential form (difffolded.pl's) is `STACK COUNT_BEFORE COUNT_AFTER`; a differential
flame graph takes its shape from the second profile and its colour from the difference.

Files that people have are read by `decode` (refusals are InputError), as flamegraph.pl reads
them (stackcollapse-*.pl, perf script + stackcollapse, py-spy `--format raw`, async-profiler's
collapsed output): a line with no frames (` 2`, py-spy's idle samples: counted under the root),
fractional counts (`a;b 0.5`), empty frames (`a;;b 1`, kept as frames with an empty name), CRLF
line ends, and bytes that are not UTF-8 (replaced by U+FFFD, and the page says so).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

from webhook.stacks import MAX_COUNT, MAX_DEPTH, MAX_TOTAL, InputError, Loaded, Stack, Tally

MAX_LINE = 1 << 20  # a stack of a megabyte is not a stack
_COUNT = re.compile(r"[0-9]+")
_NUMBER = re.compile(r"[0-9]+(?:\.[0-9]*)?|\.[0-9]+")  # flamegraph.pl's counts (and .5)
_SURROGATE = re.compile("[\ud800-\udfff]")


class FoldedError(ValueError):
    """Input that is not folded stacks; the message names the line."""


class TooLarge(FoldedError):
    """Input over one of the caps of its Limits (the results service answers 413)."""


# How often (in lines) a parse looks at its clock.
_CLOCK_EVERY = 256


@dataclass(frozen=True)
class Limits:
    """Caps on one parse of hostile stacks (the results service's pushes; None: no cap beyond
    MAX_LINE, MAX_DEPTH and MAX_COUNT). `deadline` is a time.monotonic() value: a parse still
    running then stops with TooLarge, so a request's work has a time budget."""

    max_frame: int | None = None  # characters of one frame name
    max_depth: int = MAX_DEPTH  # frames of one stack
    max_stacks: int | None = None  # distinct stacks
    max_samples: int = MAX_COUNT  # samples in all
    deadline: float | None = None

    def check_time(self, number: int) -> None:
        if self.deadline is not None and number % _CLOCK_EVERY == 0 and \
                time.monotonic() > self.deadline:
            raise TooLarge(f"line {number}: still reading after the time budget of one push; "
                           "send fewer or shorter stacks")

    def check_frames(self, frames: Stack, number: int) -> None:
        if len(frames) > self.max_depth:
            raise TooLarge(f"line {number}: {len(frames)} frames, more than {self.max_depth}")
        if self.max_frame is not None:
            for frame in frames:
                if len(frame) > self.max_frame:
                    raise TooLarge(f"line {number}: a frame name of {len(frame)} characters, "
                                   f"more than {self.max_frame}: {_excerpt(frame)!r}")

    def add(self, stacks: dict[Stack, int], frames: Stack, count: int, samples: int,
            number: int) -> int:
        """Count `count` samples of `frames` into `stacks`; the new total of samples."""
        if frames not in stacks and self.max_stacks is not None and \
                len(stacks) >= self.max_stacks:
            raise TooLarge(f"line {number}: more than {self.max_stacks} distinct stacks")
        stacks[frames] = stacks.get(frames, 0) + count
        samples += count
        if samples > self.max_samples:
            raise TooLarge(f"line {number}: more than {self.max_samples} samples in all")
        return samples


NO_LIMITS = Limits()


def parse(text: str, limits: Limits = NO_LIMITS) -> dict[Stack, int]:
    """`STACK COUNT` lines -> {frames: samples}; repeated stacks add up, blank lines and
    `#` comments are skipped, zero counts dropped. Anything else raises FoldedError (and
    nothing else) naming the line: input comes from pods and is hostile. Time and memory are
    linear in the text (no backtracking pattern); `limits` caps them further (TooLarge)."""
    stacks: dict[Stack, int] = {}
    samples = 0
    for number, line in _lines(text):
        limits.check_time(number)
        stack, _, count_text = line.rpartition(" ")
        if not stack or not _COUNT.fullmatch(count_text):
            raise FoldedError(f"line {number}: expected 'frame;frame;... COUNT', got "
                              f"{_excerpt(line)!r}")
        frames = _frames(stack, number)
        limits.check_frames(frames, number)
        count = _count(count_text, number)
        if count:
            samples = limits.add(stacks, frames, count, samples, number)
    return stacks


def _lines(text: str) -> Iterator[tuple[int, str]]:
    """(line number, stripped line) of the lines that carry data. Lines end at `\n` only,
    as editors and `sed -n Np` count them (str.splitlines also splits at \x0b, \x1c, U+2028
    and others, which frame names may hold)."""
    check_text(text)
    for number, raw in enumerate(text.split("\n"), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if len(line) > MAX_LINE:
            raise FoldedError(f"line {number}: longer than {MAX_LINE} characters")
        yield number, line


def check_text(text: str) -> None:
    """FoldedError unless `text` is a str that UTF-8 can store: JSON's "\ud800" decodes to a
    lone surrogate, which it cannot."""
    if not isinstance(text, str):
        raise FoldedError(f"expected text, got {type(text).__name__}")
    surrogate = None if text.isascii() else _SURROGATE.search(text)
    if surrogate:
        number = text.count("\n", 0, surrogate.start()) + 1
        raise FoldedError(f"line {number}: a lone surrogate (U+D800 to U+DFFF) is not text")


def _frames(stack: str, number: int) -> Stack:
    frames = tuple(stack.strip().split(";"))
    if len(frames) > MAX_DEPTH:
        raise TooLarge(f"line {number}: {len(frames)} frames, more than {MAX_DEPTH}")
    if "" in frames:
        raise FoldedError(f"line {number}: empty frame name in {_excerpt(stack)!r}")
    return frames


def _count(text: str, number: int) -> int:
    """A sample count that matched _COUNT (ASCII digits: str.isdigit also accepts '²' and '٣',
    which int() then refuses or reads), at most MAX_COUNT."""
    # int() refuses over 4,300 digits with a ValueError of its own: compare lengths first.
    count = int(text) if len(text.lstrip("0")) <= len(str(MAX_COUNT)) else MAX_COUNT + 1
    if count > MAX_COUNT:
        raise FoldedError(f"line {number}: count {_excerpt(text)} is more than {MAX_COUNT}")
    return count


def _excerpt(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


def clean_frame(name: str) -> str:
    """A frame name as folded stacks can carry it: no `;` (the separator), no line breaks."""
    return " ".join(name.replace(";", ":").split()) or "[unknown]"


def format_stacks(stacks: Mapping[Stack, int]) -> str:
    """The folded text of `stacks`, heaviest first (ties by stack, so the output is stable)."""
    ordered = sorted(stacks.items(), key=lambda item: (-item[1], item[0]))
    return "".join(f"{';'.join(frames)} {count}\n" for frames, count in ordered if count > 0)


def total(stacks: Mapping[Stack, int]) -> int:
    return sum(stacks.values())


def hottest(stacks: Mapping[Stack, int], top: int = 10) -> list[tuple[str, int]]:
    """Leaf functions by self samples, heaviest first."""
    leaves: dict[str, int] = {}
    for frames, count in stacks.items():
        leaves[frames[-1]] = leaves.get(frames[-1], 0) + count
    return sorted(leaves.items(), key=lambda item: (-item[1], item[0]))[:top]


# --- differential ---------------------------------------------------------------------------------

def diff(before: Mapping[Stack, int], after: Mapping[Stack, int], *,
         normalize: bool = True) -> dict[Stack, tuple[int, int]]:
    """{stack: (before, after)} over both profiles' stacks. With `normalize` the before counts
    are scaled to the after profile's total (difffolded.pl -n), so that two recordings of
    different length compare by share of samples, not by raw counts."""
    scale = 1.0
    before_total, after_total = total(before), total(after)
    if normalize and before_total and after_total:
        scale = after_total / before_total
    result: dict[Stack, tuple[int, int]] = {}
    for frames in set(before) | set(after):
        result[frames] = (round(before.get(frames, 0) * scale), after.get(frames, 0))
    return result


def format_diff(pairs: Mapping[Stack, tuple[int, int]]) -> str:
    ordered = sorted(pairs.items(), key=lambda item: (-max(item[1]), item[0]))
    return "".join(f"{';'.join(frames)} {a} {b}\n" for frames, (a, b) in ordered if a or b)


def parse_diff(text: str) -> dict[Stack, tuple[int, int]]:
    """The inverse of format_diff (`STACK BEFORE AFTER` lines); FoldedError names the line."""
    pairs: dict[Stack, tuple[int, int]] = {}
    for number, line in _lines(text):
        parts = line.rsplit(" ", 2)
        if len(parts) != 3 or not parts[0] or not all(_COUNT.fullmatch(p) for p in parts[1:]):
            raise FoldedError(f"line {number}: expected 'frame;... BEFORE AFTER', got "
                              f"{_excerpt(line)!r}")
        frames = _frames(parts[0], number)
        a, b = pairs.get(frames, (0, 0))
        a, b = a + _count(parts[1], number), b + _count(parts[2], number)
        if max(a, b) > MAX_COUNT:
            raise FoldedError(f"line {number}: more than {MAX_COUNT} samples for one stack")
        pairs[frames] = (a, b)
    return pairs


def from_pairs(lines: Iterable[tuple[str, int]]) -> dict[Stack, int]:
    """{stack: count} from (`a;b;c`, count) pairs (a collapsing script's output)."""
    stacks: dict[Stack, int] = {}
    for stack, count in lines:
        frames = tuple(clean_frame(frame) for frame in stack.split(";"))
        stacks[frames] = stacks.get(frames, 0) + count
    return stacks


# --- files as real tools write them ---------------------------------------------------------------

def decode(data: bytes) -> Loaded:
    """Folded stacks from a file's bytes (UTF-8; bytes that are not are replaced, and said)."""
    warnings: list[str] = []
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        text = data.decode("utf-8", errors="replace")
        replaced = text.count("\ufffd") - data.count("\ufffd".encode())
        line = data.count(b"\n", 0, error.start) + 1
        warnings.append(f"{replaced} invalid UTF-8 byte sequence{'s' if replaced != 1 else ''}"
                        f" replaced by U+FFFD \ufffd (the first on line {line})")
    return decode_text(text.removeprefix("\ufeff"), warnings)


def decode_text(text: str, warnings: list[str]) -> Loaded:
    """`STACK COUNT` lines, as flamegraph.pl reads them: the count after the last run of blanks,
    a whole or decimal number; an empty stack counts under the root; blank lines and `#`
    comments skipped."""
    stacks = Tally("folded stacks")
    for number, raw in enumerate(text.split("\n"), 1):
        line = raw.rstrip(" \t\r")
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if len(line) > MAX_LINE:
            raise InputError(f"folded stacks: line {number}: longer than {MAX_LINE} "
                             "characters")
        cut = max(line.rfind(" "), line.rfind("\t"))
        count_text = line[cut + 1:]
        if cut < 0 or not _NUMBER.fullmatch(count_text):
            raise InputError(f"folded stacks: line {number}: expected 'frame;frame;... COUNT', "
                             f"got {_excerpt(line)!r}")
        count: float
        if "." in count_text:
            count = float(count_text)
        elif len(count_text.lstrip("0")) > len(str(MAX_TOTAL)):
            raise InputError(f"folded stacks: line {number}: count {_excerpt(count_text)} is "
                             f"more than {MAX_TOTAL}")
        else:
            count = int(count_text)
        stack_text = line[:cut].strip(" \t")
        if count > 0:
            stacks.add(tuple(stack_text.split(";")) if stack_text else (), count,
                       f"line {number}")
    if not stacks.stacks:
        raise InputError("folded stacks: no samples (no 'frame;frame COUNT' line with a count "
                         "above 0)")
    return Loaded(stacks.done(), "folded", "samples", tuple(warnings))
