"""speedscope's JSON file format (https://www.speedscope.app/file-format-schema.json): written
from folded stacks for the results page's downloads, and read from the files people have
(py-spy, speedscope's own exports), sampled or evented.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping
from typing import Any, TypeGuard

from webhook.stacks import MAX_DEPTH, MAX_FRAMES, InputError, Loaded, Stack, Tally
from webhook.stacks.folded import clean_frame, total

SCHEMA = "https://www.speedscope.app/file-format-schema.json"


def build(stacks: Mapping[Stack, int], name: str) -> dict[str, Any]:
    """A speedscope file: one sampled profile, each distinct stack one weighted sample."""
    frames: list[dict[str, str]] = []
    index: dict[str, int] = {}
    samples: list[list[int]] = []
    weights: list[int] = []
    for stack, count in sorted(stacks.items(), key=lambda item: (-item[1], item[0])):
        if count <= 0:
            continue
        ids = []
        for frame in stack:
            if frame not in index:
                index[frame] = len(frames)
                frames.append({"name": frame})
            ids.append(index[frame])
        samples.append(ids)
        weights.append(count)
    return {
        "$schema": SCHEMA,
        "name": name,
        "exporter": "sidecar-debug",
        "activeProfileIndex": 0,
        "shared": {"frames": frames},
        "profiles": [{
            "type": "sampled",
            "name": name,
            "unit": "none",
            "startValue": 0,
            "endValue": total(stacks),
            "samples": samples,
            "weights": weights,
        }],
    }


def encode(stacks: Mapping[Stack, int], name: str) -> bytes:
    return json.dumps(build(stacks, name), separators=(",", ":")).encode()


# --- reading --------------------------------------------------------------------------------------

# speedscope's units -> (factor to a count, the count's unit)
MICRO = "\u00b5s"  # the micro sign, as the page's units table spells it
_UNITS = {"none": (1, "samples"), "nanoseconds": (1, "ns"), "microseconds": (1, MICRO),
          "milliseconds": (1000, MICRO), "seconds": (1_000_000, MICRO), "bytes": (1, "bytes")}


def decode(document: Any) -> Loaded:
    """The stacks of a speedscope file (its parsed JSON): every profile, sampled or evented; the
    threads of py-spy's one-profile-per-thread files merged under their names."""
    if not isinstance(document, dict) or not isinstance(document.get("profiles"), list):
        raise InputError("speedscope: JSON, but not a speedscope file (no 'profiles' list)")
    shared = document.get("shared")
    raw_frames = shared.get("frames") if isinstance(shared, dict) else None
    if not isinstance(raw_frames, list):
        raise InputError("speedscope: no 'shared.frames' list")
    names = [_frame(i, frame) for i, frame in enumerate(raw_frames)]
    profiles = [p for p in document["profiles"] if isinstance(p, dict)]
    if not profiles:
        raise InputError("speedscope: no profiles")
    units = {str(p.get("unit", "none")) for p in profiles}
    unit = units.pop() if len(units) == 1 else ""
    if unit not in _UNITS:
        raise InputError(f"speedscope: unit {unit[:40]!r} is not one of {', '.join(_UNITS)} "
                         "(or the profiles' units differ)")
    factor, label = _UNITS[unit]
    stacks = Tally("speedscope")
    for number, profile in enumerate(profiles):
        where = f"profile {number}"
        # py-spy writes one profile per thread: they are merged under the thread's name
        prefix: Stack = ()
        if len(profiles) > 1 and isinstance(profile.get("name"), str):
            prefix = (clean_frame(profile["name"]),)
        for indices, weight in _samples(profile, len(names), where):
            # time units in whole µs or ns; unitless weights may be fractional
            count = round(weight * factor) if label != "samples" else weight
            if count > 0:
                stacks.add(prefix + tuple(names[i] for i in indices), _whole(count), where)
    if not stacks.stacks:
        raise InputError("speedscope: no samples with a weight")
    return Loaded(stacks.done(), "speedscope", label)


def _whole(count: float) -> float:
    """A count as an int when it is one (JSON's 1.0 is a whole sample)."""
    return int(count) if float(count).is_integer() else count


def _frame(index: int, frame: Any) -> str:
    if not isinstance(frame, dict) or not isinstance(frame.get("name"), str):
        raise InputError(f"speedscope: frame {index} has no 'name' string")
    name = frame["name"]
    where = frame.get("file")
    if isinstance(where, str) and where:
        line = frame.get("line")
        name += f" ({where}:{line})" if _is_int(line) else f" ({where})"
    return clean_frame(name)


def _samples(profile: Mapping[str, Any], frames: int,
                        where: str) -> Iterator[tuple[list[int], float]]:
    kind = profile.get("type")
    if kind == "sampled":
        samples, weights = profile.get("samples"), profile.get("weights")
        if not isinstance(samples, list):
            raise InputError(f"speedscope: {where}: 'samples' is not a list")
        if weights is None:
            weights = [1] * len(samples)
        if not isinstance(weights, list) or len(weights) != len(samples):
            raise InputError(f"speedscope: {where}: 'weights' is not a list as long as "
                             "'samples'")
        for index, (sample, weight) in enumerate(zip(samples, weights, strict=True)):
            if not isinstance(sample, list) or not all(
                    _is_int(i) and 0 <= i < frames for i in sample):
                raise InputError(f"speedscope: {where}: sample {index} is not a list of frame "
                                 "indices")
            yield sample, _weight(weight, f"speedscope: {where}: weight {index}")
    elif kind == "evented":
        yield from _evented(profile, frames, where)
    else:
        raise InputError(f"speedscope: {where}: type {str(kind)[:40]!r} is neither 'sampled' "
                         "nor 'evented'")


def _evented(profile: Mapping[str, Any], frames: int,
             where: str) -> Iterator[tuple[list[int], float]]:
    """Open/close events -> the time spent in each stack (between consecutive events).

    The open frames are a path in a tree of the stacks seen (a node per distinct stack, made
    once): each event costs O(1), whatever the depth, and time is added to the node of the
    current stack. The stacks are spelled out once at the end, after the frames of all of them
    are counted against MAX_FRAMES (an 8 MB file of deep stacks that open and close one frame
    at a time otherwise makes gigabytes of copies)."""
    events = profile.get("events")
    if not isinstance(events, list):
        raise InputError(f"speedscope: {where}: 'events' is not a list")
    parents, frame_of, depths = [-1], [-1], [0]  # node 0: the root (no frame open)
    children: dict[tuple[int, int], int] = {}
    spent_time: dict[int, float] = {}
    node = 0
    last = 0.0
    for index, event in enumerate(events):
        if not isinstance(event, dict):
            raise InputError(f"speedscope: {where}: event {index} is not an object")
        at = _weight(event.get("at"), f"speedscope: {where}: event {index} 'at'")
        frame = event.get("frame")
        if not _is_int(frame) or not 0 <= frame < frames:
            raise InputError(f"speedscope: {where}: event {index} has no valid 'frame'")
        if at < last:
            raise InputError(f"speedscope: {where}: event {index} goes back in time")
        if node and at > last:
            spent_time[node] = spent_time.get(node, 0.0) + (at - last)
        last = at
        kind = event.get("type")
        if kind == "O":
            if depths[node] >= MAX_DEPTH:
                raise InputError(f"speedscope: {where}: event {index} opens a frame on "
                                 f"{MAX_DEPTH} open frames")
            key = (node, frame)
            child = children.get(key)
            if child is None:
                child = children[key] = len(parents)
                parents.append(node)
                frame_of.append(frame)
                depths.append(depths[node] + 1)
            node = child
        elif kind == "C" and node and frame_of[node] == frame:
            node = parents[node]
        else:
            raise InputError(f"speedscope: {where}: event {index} neither opens nor closes the "
                             "top frame")
    spent = [(stack_node, weight) for stack_node, weight in spent_time.items()
             if weight > 0]
    if sum(depths[stack_node] for stack_node, _ in spent) > MAX_FRAMES:
        raise InputError(f"speedscope: {where}: more than {MAX_FRAMES} frames in all its "
                         "distinct stacks")
    for stack_node, weight in spent:
        path = []
        while stack_node:
            path.append(frame_of[stack_node])
            stack_node = parents[stack_node]
        path.reverse()
        yield path, weight


def _is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _weight(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not (
            math.isfinite(value) and value >= 0):
        raise InputError(f"{where} is not a non-negative number")
    return float(value)
