"""bpftrace's printed map of `@[kstack, ustack, comm] = count()` as folded stacks (the toolset's
results agent pushes the `bpftrace-profile` technique's output as it is; the results service
folds it here). The text comes from the pod: every line is data, and a malformed entry is
skipped, never an error; what is over a cap of `limits` (frame length, stack depth, distinct
stacks, samples, time) raises folded.TooLarge.

Read with string methods only, one pass: time and memory are linear in the text. (The regular
expressions this replaced backtracked on a long frame: 2.77 s of CPU for one frame of 40,000
characters, quadratic in its length; issue 24.)
"""

from __future__ import annotations

from webhook.stacks import MAX_COUNT, Stack, folded

_HEX = frozenset("0123456789abcdef")
_DIGITS = frozenset("0123456789")
_MAX_COUNT_DIGITS = len(str(MAX_COUNT))


def _strip_address(name: str) -> str:
    """`0xffff81000 func` or `ffff81000 func` -> `func` (bpftrace's perf-mode addresses)."""
    start = 2 if name.startswith("0x") else 0
    end = start
    while end < len(name) and name[end] in _HEX:
        end += 1
    if end == start and start == 2:  # "0x" and no digit: read as a plain hex word instead
        start = end = 0
        while end < len(name) and name[end] in _HEX:
            end += 1
    if end == start or end >= len(name) or not name[end].isspace():
        return name
    return name[end:].lstrip()


def _strip_module(name: str) -> str:
    """`func+12 (vmlinux)` -> `func+12`: a last `(...)` without parentheses inside, after
    white space."""
    if not name.endswith(")"):
        return name
    opening = name.rfind("(")
    if opening <= 0 or ")" in name[opening + 1:-1] or not name[opening - 1].isspace():
        return name
    return name[:opening].rstrip()


def _strip_offset(name: str) -> str:
    """`func+0x1f` or `func+31` -> `func`."""
    plus = name.rfind("+")
    if plus < 0:
        return name
    offset = name[plus + 1:]
    if offset.startswith("0x"):
        digits, allowed = offset[2:], _HEX
    else:
        digits, allowed = offset, _DIGITS
    if digits and all(c in allowed for c in digits):
        return name[:plus]
    return name


def _frame(line: str, kernel: bool) -> str:
    name = line.strip()
    if " " in name:
        name = _strip_address(name)
    name = folded.clean_frame(_strip_offset(_strip_module(name)))
    return f"{name}_[k]" if kernel else name


def _entry_end(line: str) -> tuple[str, int] | None:
    """(what precedes `]:`, the count) when `line` ends an entry (`...]: COUNT`); None
    otherwise. A count of more digits than MAX_COUNT has is MAX_COUNT + 1 (refused later)."""
    end = len(line)
    digits = end
    while digits > 0 and line[digits - 1] in _DIGITS:
        digits -= 1
    if digits == end:
        return None
    colon = digits
    while colon > 0 and line[colon - 1].isspace():
        colon -= 1
    if colon < 2 or line[colon - 2:colon] != "]:":
        return None
    text = line[digits:].lstrip("0")
    count = int(text) if len(text) <= _MAX_COUNT_DIGITS else MAX_COUNT + 1
    return line[:colon - 2], count


def collapse_bpftrace(text: str, limits: folded.Limits = folded.NO_LIMITS
                      ) -> dict[Stack, int]:
    """bpftrace's printed map `@[kstack, ustack, comm]: count` -> folded stacks
    (comm;user frames root first;kernel frames root first, kernel frames marked _[k]).
    Each entry is `@[` + the frames of each stack, elements separated by lines that start
    with `,` (`@[, ` when the kernel stack is empty), ending with `, comm]: count`."""
    folded.check_text(text)
    stacks: dict[Stack, int] = {}
    samples = 0
    elements: list[list[str]] = []
    frames_in_entry = 0
    inside = False
    for number, raw in enumerate(text.split("\n"), 1):
        limits.check_time(number)
        line = raw.rstrip()
        if limits.max_frame is not None and len(line) > limits.max_frame + 64:
            raise folded.TooLarge(f"line {number}: {len(line)} characters, more than a frame "
                                  f"of {limits.max_frame} may take")
        if not inside:
            if not line.startswith("@["):
                continue
            ended = _entry_end(line)
            if ended is not None and len(ended[0]) >= 2:
                continue  # a one-line entry (of another map, or with no stacks at all)
            inside = True
            elements = [[]]
            frames_in_entry = 0
            line = line[2:]
            if not line.strip():
                continue
        ended = _entry_end(line)
        if ended is not None:
            head, count = ended
            comma = head.startswith(",")
            rest = (head[1:] if comma else head).lstrip()
            while comma and rest.startswith(","):  # `, , comm]:`: an empty user stack
                elements.append([])
                rest = rest[1:].lstrip()
            if comma or rest:
                elements.append([rest] if rest else [])
            inside = False
            kernel = elements[0] if len(elements) > 2 else []
            user = elements[1] if len(elements) > 2 else elements[0]
            comm = elements[-1][0] if len(elements) > 1 and elements[-1] else "?"
            frames = [folded.clean_frame(comm)]
            frames += [_frame(f, False) for f in reversed(user) if f.strip()]
            frames += [_frame(f, True) for f in reversed(kernel) if f.strip()]
            key = tuple(frames)
            limits.check_frames(key, number)
            if count > MAX_COUNT:
                raise folded.TooLarge(f"line {number}: count of more than {MAX_COUNT}")
            if count:
                samples = limits.add(stacks, key, count, samples, number)
            continue
        frames_in_entry += 1
        if frames_in_entry > 2 * limits.max_depth + 2:
            raise folded.TooLarge(f"line {number}: an entry of more than "
                                  f"{2 * limits.max_depth + 2} lines (a stack is at most "
                                  f"{limits.max_depth} frames)")
        stripped = line.lstrip()
        if stripped.startswith(","):
            elements.append([])
            rest = stripped[1:].strip()
            if rest:
                elements[-1].append(rest)
        elif stripped:
            elements[-1].append(line)
    return stacks
