"""`sidecar-debug render STACKS -o page.html`: the flame graph page of a profile on disk, with
the renderer the CLI and the results page use (webhook.render). No cluster involved."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from webhook import render
from webhook.stacks import InputError, Loaded, detect


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "render", help="render a profile (folded, speedscope or pprof) as a flame graph page",
        description="Write one self-contained HTML page (search, zoom, tooltips, icicle view, "
        "downloads; no network) from folded stacks, speedscope JSON or a pprof profile, gzip "
        "or not; the format is told from the content. With --diff, a differential flame graph "
        "of BASE (before) against STACKS (after).")
    parser.add_argument("stacks", metavar="STACKS", help="the profile ('-': stdin)")
    parser.add_argument("-o", "--output", metavar="FILE",
                        help="the page to write ('-': stdout; default STACKS with .html, or "
                        "stdout for stdin)")
    parser.add_argument("--diff", metavar="BASE",
                        help="the profile before: colour by what changed from it to STACKS")
    parser.add_argument("--title", help="the page's title (default: the file name)")
    parser.add_argument("--meta", metavar="FILE",
                        help="the run's meta.json (technique, duration, named share, notes)")
    parser.set_defaults(func=_render)


def _read(name: str) -> bytes:
    """The bytes of an input; one line that names it when it cannot be read."""
    try:
        return sys.stdin.buffer.read() if name == "-" else Path(name).read_bytes()
    except OSError as error:
        where = "stdin" if name == "-" else name
        raise InputError(f"cannot read {where}: {error.strerror or error}") from None


def _load(name: str) -> Loaded:
    data = _read(name)
    try:
        return detect.load(data)
    except InputError as error:
        raise InputError(f"{'stdin' if name == '-' else name}: {error}") from None


def _render(args: argparse.Namespace) -> int:
    after = _load(args.stacks)
    before = _load(args.diff) if args.diff else None
    if before is not None and before.unit != after.unit:
        raise InputError(
            f"{args.diff} counts {before.unit} ({before.format}) and {args.stacks} counts "
            f"{after.unit} ({after.format}): a differential graph compares profiles of one unit")
    meta = render.read_meta(_read(args.meta), args.meta) if args.meta else {}
    repaired = [f"{name}: {warning}" for name, loaded in (
        ("stdin" if args.stacks == "-" else args.stacks, after), (args.diff, before))
        if loaded is not None for warning in loaded.warnings]
    if repaired:  # on the page with the recording's own warnings, and said here
        notes = meta.get("warnings")
        kept = [notes] if isinstance(notes, str) else notes if isinstance(notes, list) else []
        meta = {**meta, "warnings": [*kept, *repaired]}
        for line in repaired:
            print(f"sidecar-debug render: warning: {line}", file=sys.stderr)
    source = "stdin" if args.stacks == "-" else Path(args.stacks).name
    title = args.title or (f"{Path(args.diff).name} -> {source}" if args.diff else source)
    plain = Path(args.stacks).with_suffix("") if args.stacks.endswith(".gz") else Path(
        args.stacks)  # run.folded.gz, run.pb.gz -> run.html
    output = args.output or ("-" if args.stacks == "-" else str(plain.with_suffix(".html")))
    stem = plain.stem if args.stacks != "-" else "profile"
    profile = render.Profile(after.stacks, meta=meta, title=title, name=stem,
                             base=before.stacks if before else None, unit=after.unit)
    page = render.render(profile)
    if output == "-":
        sys.stdout.write(page.html)
    else:
        Path(output).write_text(page.html, encoding="utf-8")
        lines = render.summary(profile)
        if before is not None:  # each side's real total: the page scales A to compare
            base = render.Profile(before.stacks, unit=before.unit)
            lines.append(f"base {Path(args.diff).name}: " + render.summary(base)[0].strip())
        print(f"{output}: {after.format}, " + "; ".join(" ".join(line.split()) for line in lines),
              file=sys.stderr)
    return 0
