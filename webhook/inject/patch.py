"""JSONPatch by diffing the mutated copy against the original (as Istio's createPatch does).

Hand-built operations get array indices and `/`, `~` escaping in keys wrong; a diff cannot.
The diff aligns list elements by content (difflib), so inserting the sidecar in front of 30
containers is one `add`, not 30 containers rewritten field by field, which is what a naive
positional diff (jsonpatch.make_patch) produces, at tens of milliseconds per pod.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Sequence
from typing import Any

import jsonpatch

Op = dict[str, Any]


def escape(key: str) -> str:
    """RFC 6901: `~` becomes `~0`, then `/` becomes `~1`."""
    return key.replace("~", "~0").replace("/", "~1")


def _identity(value: Any) -> str:
    """What makes a list element "the same one": its name (and mount path) for named objects
    such as containers, volumes, env vars and mounts, else its whole content."""
    if isinstance(value, dict) and isinstance(value.get("name"), str):
        return f"name={value['name']}|{value.get('mountPath', '')}"
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _diff(old: Any, new: Any, path: str, ops: list[Op]) -> None:
    if type(old) is type(new) and isinstance(old, dict):
        for key in old:
            if key not in new:
                ops.append({"op": "remove", "path": f"{path}/{escape(key)}"})
        for key, value in new.items():
            # The escaped path only for keys that changed: a pod has hundreds that did not.
            if key not in old:
                ops.append({"op": "add", "path": f"{path}/{escape(key)}", "value": value})
            elif old[key] != value:
                _diff(old[key], value, f"{path}/{escape(key)}", ops)
        return
    if type(old) is type(new) and isinstance(old, list):
        _diff_list(old, new, path, ops)
        return
    if old != new or type(old) is not type(new):
        ops.append({"op": "replace", "path": path, "value": new})


def _end_trimmed_opcodes(
    old_ids: list[str], new_ids: list[str]
) -> Sequence[tuple[str, int, int, int, int]] | None:
    """Opcodes for lists that differ by one run of items inserted or removed in one place (the
    sidecar put in front of the containers, a mount appended to every app container): what is
    left once the common ends are trimmed. None when the middle needs the matcher (difflib
    costs a SequenceMatcher per list; this, two passes over the identities)."""
    n_old, n_new = len(old_ids), len(new_ids)
    limit = min(n_old, n_new)
    prefix = 0
    while prefix < limit and old_ids[prefix] == new_ids[prefix]:
        prefix += 1
    suffix = 0
    while suffix < limit - prefix and old_ids[n_old - 1 - suffix] == new_ids[n_new - 1 - suffix]:
        suffix += 1
    if prefix + suffix != limit:
        return None
    opcodes = [("equal", 0, prefix, 0, prefix)] if prefix else []
    if n_new > n_old:
        opcodes.append(("insert", prefix, prefix, prefix, n_new - suffix))
    elif n_old > n_new:
        opcodes.append(("delete", prefix, n_old - suffix, prefix, prefix))
    if suffix:
        opcodes.append(("equal", n_old - suffix, n_old, n_new - suffix, n_new))
    return opcodes


def _diff_list(old: list[Any], new: list[Any], path: str, ops: list[Op]) -> None:
    old_ids, new_ids = [_identity(v) for v in old], [_identity(v) for v in new]
    opcodes = _end_trimmed_opcodes(old_ids, new_ids)
    if opcodes is None:
        opcodes = difflib.SequenceMatcher(a=old_ids, b=new_ids, autojunk=False).get_opcodes()
    shift = 0  # how far indices in `old` have moved because of the ops emitted so far
    for tag, i1, i2, j1, j2 in opcodes:
        if tag == "equal" or (tag == "replace" and i2 - i1 == j2 - j1):
            for offset in range(i2 - i1):
                old_item, new_item = old[i1 + offset], new[j1 + offset]
                if old_item != new_item:
                    _diff(old_item, new_item, f"{path}/{i1 + offset + shift}", ops)
            continue
        base = i1 + shift
        for _ in range(i1, i2):
            ops.append({"op": "remove", "path": f"{path}/{base}"})
        for j in range(j1, j2):
            ops.append({"op": "add", "path": f"{path}/{base + j - j1}", "value": new[j]})
        shift += (j2 - j1) - (i2 - i1)


def create_patch(original: dict[str, Any], mutated: dict[str, Any]) -> list[Op]:
    ops: list[Op] = []
    _diff(original, mutated, "", ops)
    return ops


def apply_patch(document: dict[str, Any], ops: list[Op]) -> dict[str, Any]:
    """Apply with the reference implementation (the tests check our diff against it)."""
    result: dict[str, Any] = jsonpatch.apply_patch(document, ops)
    return result
