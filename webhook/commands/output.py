"""`-o json|yaml` as kubectl has it, on every command that prints results.

Each result is one object with `apiVersion: cli.sidecar-debug.io/v1` and its own `kind`: the
fields of a kind are only ever added to within that version (scripts may rely on them; a change
that removes or renames a field gets a new version). The schemas: docs/cli.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, TextIO

API_VERSION = "cli.sidecar-debug.io/v1"
FORMATS = ("json", "yaml")


def add_output(
    parser: argparse.ArgumentParser, text: str = "text", json_alias: bool = False
) -> None:
    """`-o/--output TEXT|json|yaml` (default TEXT, the human form); with `json_alias`, the old
    `--json` flag too, as a deprecated alias of `-o json`."""
    parser.add_argument(
        "-o", "--output", choices=(text, *FORMATS), default=text,
        help=f"{text} (default), json or yaml (docs/cli.md has the schema)",
    )
    if json_alias:
        parser.add_argument(
            "--json", action="store_const", const="json", dest="output",
            help="deprecated: the same as -o json",
        )


def document(kind: str, **fields: Any) -> dict[str, Any]:
    """A result object: apiVersion, kind, then `fields` in their order."""
    return {"apiVersion": API_VERSION, "kind": kind, **fields}


def dumps(value: Any, fmt: str) -> str:
    """`value` as JSON (2-space indent, a final newline) or block YAML (key order kept)."""
    if fmt == "json":
        return json.dumps(value, indent=2, ensure_ascii=False) + "\n"
    import yaml

    return str(yaml.safe_dump(value, sort_keys=False, allow_unicode=True,
                              default_flow_style=False))


def emit(value: Any, fmt: str, out: TextIO | None = None) -> None:
    (out or sys.stdout).write(dumps(value, fmt))
