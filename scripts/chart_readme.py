#!/usr/bin/env python3
"""Generate the values table of a chart's README.md from the `# --` comments in values.yaml.

A small stand-in for helm-docs (not installable here). The rules it follows:
  * `# -- text` right above a key documents that key; following `#` lines continue the text;
    `# -- (type) text` overrides the inferred type.
  * Every leaf value (scalar, list or empty map) must be documented, itself or through a
    documented parent map; an undocumented leaf is an error, so a new value cannot slip in
    without a description.
  * The table replaces whatever sits between the markers
    `<!-- values-table:start -->` and `<!-- values-table:end -->` in README.md.

Usage: chart_readme.py [--chart DIR]           rewrite DIR/README.md
       chart_readme.py [--chart DIR] --check   exit 1 when README.md is stale (CI)
"""

from __future__ import annotations

import argparse
import difflib
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

START = "<!-- values-table:start -->"
END = "<!-- values-table:end -->"
DEFAULT_CHART = Path(__file__).resolve().parent.parent / "charts" / "sidecar-debug"

_KEY = re.compile(r"^(?P<indent>\s*)(?P<key>[A-Za-z0-9_.\-/]+|\"[^\"]+\"|'[^']+'):(?:\s|$)")
_DOC_START = re.compile(r"^\s*#\s--\s?(?P<text>.*)$")
_DOC_MORE = re.compile(r"^\s*#\s?(?P<text>.*)$")
_TYPE = re.compile(r"^\((?P<type>[a-z]+)\)\s*(?P<rest>.*)$")


class ReadmeError(Exception):
    pass


@dataclass(frozen=True)
class Doc:
    path: str
    type: str | None
    text: str


def parse_docs(text: str) -> dict[str, Doc]:
    """Documented keys of a values.yaml text, by dotted path."""
    docs: dict[str, Doc] = {}
    stack: list[tuple[int, str]] = []
    pending: list[str] | None = None
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            pending = None
            continue
        start = _DOC_START.match(line)
        if start:
            pending = [start.group("text").strip()]
            continue
        if pending is not None and line.lstrip().startswith("#"):
            more = _DOC_MORE.match(line)
            pending.append(more.group("text").strip() if more else "")
            continue
        if line.lstrip().startswith("#"):
            continue
        key = _KEY.match(line)
        if not key or line.lstrip().startswith("-"):
            pending = None
            continue
        indent = len(key.group("indent"))
        while stack and stack[-1][0] >= indent:
            stack.pop()
        name = key.group("key").strip("\"'")
        stack.append((indent, name))
        path = ".".join(part for _, part in stack)
        if pending is not None:
            body = " ".join(part for part in pending if part)
            declared = _TYPE.match(body)
            type_, body = (
                (declared.group("type"), declared.group("rest")) if declared else (None, body)
            )
            if not body:
                raise ReadmeError(f"values.yaml:{number}: empty `# --` description for {path}")
            docs[path] = Doc(path, type_, body)
        pending = None
    return docs


def leaves(values: Any, prefix: str = "") -> dict[str, Any]:
    """Leaf values by dotted path: scalars, lists and empty maps."""
    if isinstance(values, dict) and values:
        out: dict[str, Any] = {}
        for key, value in values.items():
            out.update(leaves(value, f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {prefix: values}


def lookup(values: Any, path: str) -> Any:
    node = values
    for part in path.split("."):
        node = node[part]
    return node


def infer_type(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "list"
    if isinstance(value, dict):
        return "object"
    return "string" if value is None else type(value).__name__


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_table(values_text: str) -> str:
    values = yaml.safe_load(values_text) or {}
    docs = parse_docs(values_text)
    for path in docs:
        try:
            lookup(values, path)
        except (KeyError, TypeError) as exc:
            raise ReadmeError(f"documented key {path} is not in values.yaml") from exc
    undocumented = [
        path
        for path in leaves(values)
        if not any(path == doc or path.startswith(doc + ".") for doc in docs)
    ]
    if undocumented:
        raise ReadmeError(
            "values without a `# --` description (document them in values.yaml): "
            + ", ".join(undocumented)
        )
    rows = ["| Key | Type | Default | Description |", "|-----|------|---------|-------------|"]
    for path, doc in docs.items():
        value = lookup(values, path)
        default = _cell(json.dumps(value, sort_keys=False))
        type_ = doc.type or infer_type(value)
        rows.append(f"| `{path}` | {type_} | `{default}` | {_cell(doc.text)} |")
    return "\n".join(rows) + "\n"


def render_readme(readme: str, table: str) -> str:
    if START not in readme or END not in readme:
        raise ReadmeError(f"README.md needs the markers {START} and {END}")
    head, rest = readme.split(START, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{START}\n{table}{END}{tail}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chart", type=Path, default=DEFAULT_CHART, help="chart directory")
    parser.add_argument("--check", action="store_true", help="fail when README.md is stale")
    args = parser.parse_args(argv)
    values_path, readme_path = args.chart / "values.yaml", args.chart / "README.md"
    try:
        current = readme_path.read_text()
        wanted = render_readme(current, render_table(values_path.read_text()))
    except (OSError, ReadmeError, yaml.YAMLError) as exc:
        print(f"chart_readme: {exc}", file=sys.stderr)
        return 1
    if args.check:
        if current == wanted:
            print(f"{readme_path} is up to date")
            return 0
        sys.stderr.writelines(
            difflib.unified_diff(
                current.splitlines(keepends=True),
                wanted.splitlines(keepends=True),
                str(readme_path),
                "generated",
            )
        )
        print(
            f"{readme_path} is stale: run python3 scripts/chart_readme.py and commit it",
            file=sys.stderr,
        )
        return 1
    if current != wanted:
        readme_path.write_text(wanted)
        print(f"wrote {readme_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
