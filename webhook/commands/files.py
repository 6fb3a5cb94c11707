"""`-f FILE` as kubectl reads it: repeatable, `-` for stdin, a directory's .json/.yaml/.yml
files (in name order; with `-R` its subdirectories' too).

Everything named is read before any work starts, so a typo in the third `-f` fails the command
before the first file's output is written (kubectl resolves its paths first too). A URL is not
fetched: the message says how to pipe it in.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from pathlib import Path

MANIFEST_SUFFIXES = (".json", ".yaml", ".yml")  # what kubectl takes from a directory
STDIN = "-"
STDIN_NAME = "<stdin>"


class InputsError(ValueError):
    """A `-f` that names nothing readable: one line, what to do (exit 2)."""


@dataclass(frozen=True)
class Input:
    name: str  # as messages name it: the path as given (joined under a directory), or <stdin>
    data: bytes


def add_filename(parser: argparse.ArgumentParser, what: str = "manifests") -> None:
    """`-f/--filename` (required, repeatable) and `-R/--recursive`, with kubectl's meaning."""
    parser.add_argument(
        "-f", "--filename", action="append", required=True, metavar="FILE",
        help=f"{what}: a YAML or JSON file, - for stdin, or a directory (its .json, .yaml and "
        ".yml files); repeat -f for more",
    )
    parser.add_argument(
        "-R", "--recursive", action="store_true",
        help="with a directory in -f: its subdirectories' files too",
    )


def expand(filenames: list[str], recursive: bool) -> list[str]:
    """The files named by `filenames`, in order: files as given, directories' manifests in name
    order. InputsError for a path that does not exist, a URL, or `-` given twice."""
    found: list[str] = []
    for name in filenames:
        if name == STDIN:
            if STDIN in found:
                raise InputsError("-f - (stdin) is given twice; stdin can be read only once")
            found.append(name)
            continue
        if "://" in name:
            raise InputsError(
                f"-f {name}: URLs are not fetched; pipe the document in: "
                f"`curl -fsSL {name} | sidecar-debug ... -f -`"
            )
        path = Path(name)
        if path.is_dir():
            found.extend(_directory(path, recursive))
        elif path.exists():
            found.append(name)
        else:
            raise InputsError(f"-f {name}: the path does not exist")
    return found


def _directory(root: Path, recursive: bool) -> list[str]:
    files: list[str] = []
    for directory, subdirectories, names in os.walk(root):
        subdirectories.sort()
        if not recursive:
            subdirectories.clear()
        files.extend(
            os.path.join(directory, name)
            for name in sorted(names)
            if name.endswith(MANIFEST_SUFFIXES)
        )
    return files


def read_all(filenames: list[str], recursive: bool) -> list[Input]:
    """Every input's bytes (stdin as <stdin>); InputsError naming the first that cannot be
    read, or when a directory holds no manifest at all."""
    inputs: list[Input] = []
    for name in expand(filenames, recursive):
        try:
            if name == STDIN:
                inputs.append(Input(STDIN_NAME, sys.stdin.buffer.read()))
                continue
            with open(name, "rb") as handle:
                inputs.append(Input(name, handle.read()))
        except OSError as exc:
            raise InputsError(f"cannot read {name}: {exc.strerror or exc}") from None
    if not inputs:
        where = ", ".join(filenames)
        hint = "" if recursive else " (-R reads subdirectories)"
        raise InputsError(f"-f {where}: no .json, .yaml or .yml files{hint}")
    return inputs
