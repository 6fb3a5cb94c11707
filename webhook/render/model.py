"""What a flame graph page shows: the stacks, and the run's facts taken from its metadata.

The metadata is a run's meta.json (written by the toolset's recording or by the results store),
read as untrusted data: only known keys of the expected types become facts, every value is shown
as text. The share of named frames comes from the recording when it says (`named_share`, a
fraction 0..1); otherwise it is computed here from the frame names: bracketed frames (the
toolset's `[unknown]`, `[libuv.so.1.0.0]`, `[unwind stopped: ...]`), `<unknown>`, `??` and bare
addresses (`0x7f3a...`) are unnamed.
"""

from __future__ import annotations

import json
import math
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from itertools import chain, count, repeat
from operator import mul
from typing import Any, TypeGuard

from webhook.stacks import Stack, spell_unit

# The toolset's convention: what it cannot name it brackets ([unknown], [libuv.so.1.0.0],
# [unwind stopped: ...], [vdso]); other tools write <unknown>, ?? or a bare address.
_UNNAMED = re.compile(r"\[.*|<unknown>|\?\?|0x[0-9a-fA-F]+|[0-9a-fA-F]{8,16}", re.S)
MAX_NOTES = 20
# Units of time, in seconds; a weighted profile's amounts are shown in the largest unit of
# which they hold one or more (4.31 s, not 4310000000 ns).
TIME_UNITS = {"s": 1.0, "ms": 1e-3, "\u00b5s": 1e-6, "ns": 1e-9}
_BYTES = (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10))
MAX_TEXT = 500  # characters of one fact or note shown
MAX_META = 1 << 20  # bytes of a run's meta.json read


@dataclass(frozen=True)
class NamedShare:
    share: float  # named frames / all sampled frames, 0..1
    frames: float  # sampled frames (times their weights); 0 when the recording gave the share
    source: str  # "meta.json" or "frames"


def named_share(stacks: Mapping[Stack, float]) -> NamedShare | None:
    """The share of sampled frames (each stack's frames times its count) that have a name."""
    return share_of(frame_table(stacks), list(stacks.values()))


@dataclass(frozen=True)
class FrameTable:
    """Stacks as the page carries them: each distinct frame name once, and every stack's frames
    as indices into `names`, all stacks in one flat list with each stack's depth."""

    names: list[str]
    frames: list[int]
    depths: list[int]


def frame_table(stacks: Iterable[Stack]) -> FrameTable:
    # Per frame only C loops: a 50k-stack profile has millions of frames. The defaultdict
    # numbers each new name as it is first seen, in the same pass that maps every frame.
    index: defaultdict[str, int] = defaultdict(count().__next__)
    frames = list(map(index.__getitem__, chain.from_iterable(stacks)))
    return FrameTable(list(index), frames, list(map(len, stacks)))


def share_of(table: FrameTable, counts: list[float]) -> NamedShare | None:
    sampled = sum(map(mul, table.depths, counts))
    if not sampled:
        return None
    flags = [0 if is_named(name) else 1 for name in table.names]
    missing = 0
    if any(flags):  # each frame's flag times its stack's count
        weights = chain.from_iterable(map(repeat, counts, table.depths))
        missing = sum(map(mul, map(flags.__getitem__, table.frames), weights))
    return NamedShare((sampled - missing) / sampled, sampled, "frames")


def is_named(frame: str) -> bool:
    """False for what a tool writes where it has no name, and for an empty frame (`a;;b`)."""
    return bool(frame) and _UNNAMED.fullmatch(frame) is None


@dataclass(frozen=True)
class Profile:
    """One flame graph: `stacks` (root first; a differential graph's after profile, whose shape
    it takes), `base` (the before profile of a differential graph), `meta` (the run's meta.json
    or the store's record), `title` and the unit of the counts."""

    stacks: Mapping[Stack, float]
    meta: Mapping[str, Any] = field(default_factory=dict)
    title: str = ""
    base: Mapping[Stack, float] | None = None
    unit: str = ""
    # file name stem of the page's downloads (sanitised again where used)
    name: str = "profile"

    @property
    def differential(self) -> bool:
        return self.base is not None

    def named(self, table: FrameTable | None = None,
              counts: list[float] | None = None) -> NamedShare | None:
        """From the recording's metadata when it says, computed from the frames otherwise
        (from `table`, frame_table() of the stacks with `counts`, when the caller has it)."""
        value = self.meta.get("named_share")
        if (not self.differential and _number(value) and 0 <= value <= 1):
            return NamedShare(float(value), 0, "meta.json")
        if table is not None and counts is not None:
            return share_of(table, counts)
        return named_share(self.stacks)

    def count_unit(self) -> str:
        """What the counts are, spelled as the page's downloads know it (samples, \u00b5s, ns,
        bytes...)."""
        unit = self.unit or self.meta.get("unit")
        return spell_unit(unit) if isinstance(unit, str) else "samples"

    def facts(self) -> list[tuple[str, str]]:
        """(label, text) pairs for the page's header, from the metadata keys we know."""
        meta = self.meta
        facts: list[tuple[str, str]] = []

        def add(label: str, value: Any, suffix: str = "") -> None:
            if isinstance(value, str) and value.strip():
                facts.append((label, _text(value)))
            elif _number(value):
                facts.append((label, f"{value:g}{suffix}"))

        namespace, pod = meta.get("namespace"), meta.get("pod")
        if isinstance(pod, str) and pod:
            add("pod", f"{namespace}/{pod}" if isinstance(namespace, str) and namespace else pod)
        add("container", meta.get("container"))
        add("technique", meta.get("technique"))
        add("type", meta.get("type"))
        add("runtime", meta.get("runtime"))
        add("started", meta.get("started"))
        seconds = meta.get("seconds", meta.get("duration"))
        add("duration", seconds, " s")
        add("frequency", meta.get("frequency"), " Hz")
        mean, deepest = meta.get("mean_depth"), meta.get("max_depth")
        if _number(mean) and _number(deepest):
            add("depth", f"{mean:g} frames on average, {deepest:g} at most")
        unwinding = meta.get("unwinding")
        if isinstance(unwinding, Mapping):
            parts = [f"{key}: {value}" for key, value in unwinding.items()
                     if isinstance(key, str) and isinstance(value, str | int | float)]
            add("unwinding", ", ".join(parts))
        else:
            add("unwinding", unwinding)
        return facts

    def notes(self, key: str) -> list[str]:
        """meta[key] as lines of text (`notes`, `warnings`: a string or a list of strings)."""
        value = self.meta.get(key)
        items = [value] if isinstance(value, str) else value if isinstance(value, list) else []
        return [_text(item) for item in items if isinstance(item, str) and item.strip()][
            :MAX_NOTES]


def _number(value: Any) -> TypeGuard[int | float]:
    return (isinstance(value, int | float) and not isinstance(value, bool)
            and math.isfinite(value))


def _text(value: str) -> str:
    text = " ".join(value.split())
    return text if len(text) <= MAX_TEXT else text[:MAX_TEXT] + "..."


def printable(text: str) -> str:
    """App text for a terminal: control, bidirectional and other invisible characters escaped
    (as the toolset's summary shows names)."""
    return text if text.isprintable() else "".join(
        c if c.isprintable() else ascii(c)[1:-1] for c in text)


def amount(value: float, unit: str) -> str:
    """A count as a person reads it: samples as they are (`1377 samples`), time in the largest
    unit it holds one of (`4.31 s`, `620 ms`), bytes in binary multiples (`1.02 MiB`)."""
    if unit in TIME_UNITS:
        seconds = value * TIME_UNITS[unit]
        for name, size in TIME_UNITS.items():
            if abs(seconds) >= size or name == "ns":
                return f"{_figure(seconds / size)} {name}"
    if unit == "bytes":
        for name, size in _BYTES:
            if abs(value) >= size:
                return f"{_figure(value / size)} {name}"
        return f"{_figure(value)} bytes"
    return f"{_count(value)} {unit}"


def _figure(value: float) -> str:
    """Three significant digits, never an exponent: 4.31, 62.5, 620, 4310."""
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.3g}"


def _count(value: float) -> str:
    """A number of samples: whole, or with at most 3 decimals when the file's counts are
    fractional."""
    if float(value).is_integer():
        return str(int(value))
    return f"{value:.3f}".rstrip("0").rstrip(".")


def weighted_by(unit: str) -> str:
    """What a weighted profile's counts measure, in words."""
    return "time" if unit in TIME_UNITS else unit


def summary(profile: Profile, *, hottest: int = 0) -> list[str]:
    """The CLI's lines about a profile: its hottest functions (when asked), samples (or the
    total of a weighted profile, readable), named share and where that share comes from."""
    lines: list[str] = []
    total = sum(profile.stacks.values())
    unit = profile.count_unit()
    if hottest:
        leaves: dict[str, float] = {}
        for stack, count in profile.stacks.items():
            if stack:  # an empty stack (py-spy's idle samples) has no function
                leaves[stack[-1]] = leaves.get(stack[-1], 0) + count
        ranked = sorted(leaves.items(), key=lambda item: (-item[1], item[0]))[:hottest]
        lines.append(f"hottest functions (self {weighted_by(unit)}):")
        width = "6" if unit == "samples" else "10"
        lines += [f"  {100 * count / (total or 1):5.1f}%  "
                  f"{_count(count) if unit == 'samples' else amount(count, unit):>{width}}  "
                  f"{printable(name)[:200] or '(empty frame name)'}"
                  for name, count in ranked]
    lines.append(f"{'samples:':<15}{_count(total)}" if unit == "samples" else
                 f"{'total:':<15}{amount(total, unit)}")
    named = profile.named()
    if named is not None:
        if named.source == "meta.json":
            source = "from the recording"
        elif unit == "samples" and float(named.frames).is_integer():
            source = f"computed from the frame names, {int(named.frames)} sampled frames"
        else:
            source = ("computed from the frame names, weighted by the counts" if unit == "samples"
                      else f"computed from the frame names, weighted by {weighted_by(unit)}")
        lines.append(f"{'named frames:':<15}{100 * named.share:.1f} % ({source})")
    return lines


def read_meta(data: bytes | None, where: str = "meta.json") -> dict[str, Any]:
    """A run's meta.json as a dict; unreadable metadata does not stop the graph: it becomes a
    warning on the page."""
    if data is None:
        return {}
    problem = ""
    if len(data) > MAX_META:
        problem = f"larger than {MAX_META} bytes"
    else:
        try:
            meta = json.loads(data)
        except (ValueError, RecursionError) as error:
            problem = f"not JSON ({str(error)[:100]})"
        else:
            if isinstance(meta, dict):
                return meta
            problem = "not a JSON object"
    return {"warnings": [f"{where} is ignored: {problem}"]}
