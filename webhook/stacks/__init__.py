"""Stacks and the profile formats they are written and read in: one module per format, each with
its encoder and its decoder.

- `folded`: folded stacks (`main;compute;fib 37`), the source of truth of every stored run: the
  strict parser of pushes and the lenient reader of the files real tools write (flamegraph.pl's
  rules), the differential form, what is computed from them.
- `pprof`: Go's profile.proto, gzip-compressed, written and read by hand (no protobuf runtime).
- `speedscope`: speedscope's JSON file format.
- `otlp`: the OpenTelemetry profiles export request (encoder only: nothing sends one to us).
- `detect`: a file in any of the formats above, its format told from its content.

This module holds what the formats share: the `Stack` type, the caps of one read, the result of
a read (`Loaded`) and its error (`InputError`), and the spelling of a unit of counts.

Pure and at the bottom: the package imports nothing of the project's (tests/unit/test_layout.py);
the results service and the flame-graph renderer both import it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

Stack = tuple[str, ...]
Counts = dict[Stack, float]  # int where the file counts whole samples

MAX_DEPTH = 4096  # frames in one stack (perf and bpftrace stop at 127 by default)
MAX_COUNT = (1 << 53) - 1  # samples: exact in JSON and the page's JavaScript numbers
MAX_FRAMES = 10_000_000  # frames of all distinct stacks of one file (the page carries each one)
MAX_TOTAL = MAX_COUNT  # the sum of all counts of one file

_UNITS = {"count": "samples", "samples": "samples", "microseconds": "\u00b5s", "us": "\u00b5s",
          "\u00b5s": "\u00b5s", "\u03bcs": "\u00b5s", "nanoseconds": "ns", "ns": "ns",
          "milliseconds": "ms", "ms": "ms", "seconds": "s", "s": "s", "bytes": "bytes",
          "byte": "bytes", "b": "bytes"}


class InputError(ValueError):
    """Input that is not a profile we read; the message names the format it was read as and
    says what is wrong, in one line."""


@dataclass(frozen=True)
class Loaded:
    stacks: Counts
    format: str  # "folded", "speedscope", "pprof"
    unit: str  # what the counts are: "samples", "\u00b5s", "ns", "bytes", ...
    warnings: tuple[str, ...] = field(default=())  # what was repaired on the way, for the page


class Tally:
    """Stacks as they are read, with the caps every format shares: depth of one stack, frames
    of all distinct stacks, the sum of the counts."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.stacks: Counts = {}
        self.frames = 0

    def add(self, stack: Stack, count: float, where: str = "") -> None:
        if len(stack) > MAX_DEPTH:
            raise InputError(f"{self.what}: {where + ': ' if where else ''}a stack of "
                             f"{len(stack)} frames, more than {MAX_DEPTH}")
        known = self.stacks.get(stack)
        if known is None:
            self.frames += len(stack)
            if self.frames > MAX_FRAMES:
                raise InputError(f"{self.what}: more than {MAX_FRAMES} frames in all its "
                                 "distinct stacks")
            self.stacks[stack] = count
        else:
            self.stacks[stack] = known + count

    def done(self) -> Counts:
        if sum(self.stacks.values()) > MAX_TOTAL:
            raise InputError(f"{self.what}: the counts add up to more than {MAX_TOTAL}")
        return self.stacks


def spell_unit(unit: str) -> str:
    """A unit of counts as the page spells it: `count` is samples, time units short."""
    if not unit.strip():
        return "samples"
    return _UNITS.get(unit.strip().lower(), " ".join(unit.split())[:40])
