"""bpftrace's printed map of `@[kstack, ustack, comm] = count()` as folded stacks (the toolset's
results agent pushes the `bpftrace-profile` technique's output as it is; the results service
folds it here). The text comes from the pod: every line is data, and a malformed entry is
skipped, never an error."""

from __future__ import annotations

import re

from webhook.results import folded

_OFFSET = re.compile(r"\+(0x[0-9a-f]+|\d+)$")
_ADDRESS = re.compile(r"^(0x)?[0-9a-f]+\s+")


def _frame(line: str, kernel: bool) -> str:
    name = _ADDRESS.sub("", line.strip()) if " " in line.strip() else line.strip()
    name = re.sub(r"\s+\([^()]*\)$", "", name)  # perf-mode module suffix
    name = _OFFSET.sub("", name)
    name = folded.clean_frame(name)
    return f"{name}_[k]" if kernel else name


def collapse_bpftrace(text: str) -> dict[folded.Stack, int]:
    """bpftrace's printed map `@[kstack, ustack, comm]: count` -> folded stacks
    (comm;user frames root first;kernel frames root first, kernel frames marked _[k]).
    Each entry is `@[` + the frames of each stack, elements separated by lines that start
    with `,` (`@[, ` when the kernel stack is empty), ending with `, comm]: count`."""
    stacks: dict[folded.Stack, int] = {}
    elements: list[list[str]] = []
    inside = False
    for raw in text.splitlines():
        line = raw.rstrip()
        if not inside:
            if not line.startswith("@[") or re.match(r"^@\[.*\]:\s*\d+$", line):
                continue  # not a stack entry (or a one-line entry of another map)
            inside = True
            elements = [[]]
            line = line[2:]
            if not line.strip():
                continue
        end = re.match(r"^(,?)\s*(.*)\]:\s*(\d+)$", line)
        if end:
            if end.group(1) or end.group(2):
                elements.append([end.group(2)] if end.group(2) else [])
            inside = False
            kernel = elements[0] if len(elements) > 2 else []
            user = elements[1] if len(elements) > 2 else elements[0]
            comm = elements[-1][0] if len(elements) > 1 and elements[-1] else "?"
            frames = [folded.clean_frame(comm)]
            frames += [_frame(f, False) for f in reversed(user) if f.strip()]
            frames += [_frame(f, True) for f in reversed(kernel) if f.strip()]
            key = tuple(frames)
            stacks[key] = stacks.get(key, 0) + int(end.group(3))
            continue
        if line.lstrip().startswith(","):
            elements.append([])
            rest = line.lstrip()[1:].strip()
            if rest:
                elements[-1].append(rest)
        elif line.strip():
            elements[-1].append(line)
    return stacks
