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


def _diff_list(old: list[Any], new: list[Any], path: str, ops: list[Op]) -> None:
    old_ids, new_ids = [_identity(v) for v in old], [_identity(v) for v in new]
    if len(new_ids) > len(old_ids) and new_ids[: len(old_ids)] == old_ids:
        # Items only appended (a mount added to every app container): the very opcodes the
        # matcher finds (equal prefix, insert at the end), without building one per list.
        opcodes: Sequence[tuple[str, int, int, int, int]] = [
            ("equal", 0, len(old), 0, len(old)),
            ("insert", len(old), len(old), len(old), len(new)),
        ]
    else:
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
