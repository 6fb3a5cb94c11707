"""The profile a rendered page carries, read back for the tests: its JSON data block, and the
stacks it draws (frame names by index, one flat list cut by depths) with their counts."""

from __future__ import annotations

import json
import re
from typing import Any


def page_data(html: str) -> Any:
    match = re.search(r'<script id="profile" type="application/json">(.*?)</script>', html, re.S)
    assert match, html[:500]
    return json.loads(match.group(1))


def drawn(data: Any, key: str = "counts") -> dict[tuple[str, ...], int]:
    stacks: dict[tuple[str, ...], int] = {}
    at = 0
    for depth, count in zip(data["depths"], data[key], strict=True):
        stacks[tuple(data["names"][i] for i in data["frames"][at:at + depth])] = count
        at += depth
    return stacks
