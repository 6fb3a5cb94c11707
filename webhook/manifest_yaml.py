"""Manifest YAML for offline `inject`: read as kubectl does, write back only what changed.

- Documents are cut at their `---` / `...` marker lines (a marker at the start of a line ends
  any scalar, so this split is exact), and each is handled on its own: one bad document is
  reported with its line and the others go on. A document that is not changed is copied as its
  original bytes (comments, styles, even its line endings stay).
- Every document is first read by libyaml's C event parser (PyYAML's CSafeLoader): syntax
  errors, duplicate keys (an error, as kubectl's strict decoding says, with both lines) and the
  top-level `kind`, without building Python objects for the CRDs and ConfigMaps that make up
  most of an install. Only documents that may hold pods are read into objects.
- What changed is spliced into the original lines: the object before and after injection are
  written by the same emitter, and only the lines between those two renderings are applied
  where they align with the original, so comments, key order, quotes and block styles of
  everything else stay and the diff a reviewer sees is only the injection. The result must
  read back as the injected object. libyaml reads and writes first (fast_load, fast_write);
  where its output cannot be spliced (e.g. block sequences indented under their key), the
  document is round-tripped by ruamel.yaml (load, merge, write), which keeps comments in the
  tree and writes with the document's own indentation.
- Scalars are read with the YAML 1.2 core schema, as both loaders are told here: `12:30`,
  `=`, `yes`, `2024-01-01` are strings; `0o17` and `0x1F` are ints, `017` is 17.
"""

from __future__ import annotations

import copy
import difflib
import io
import json
import re
from dataclasses import dataclass
from typing import Any

import yaml
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import YAMLError as RuamelYAMLError
from ruamel.yaml.representer import RoundTripRepresenter
from ruamel.yaml.resolver import VersionedResolver
from ruamel.yaml.scalarstring import SingleQuotedScalarString

STR_TAG = "tag:yaml.org,2002:str"
# The YAML 1.2 core schema's implicit types (https://yaml.org/spec/1.2.2/#1032-tag-resolution),
# plus the merge key `<<` that kubectl's YAML library also honours. Order matters: int first.
CORE_SCHEMA: tuple[tuple[str, re.Pattern[str], str], ...] = (
    ("tag:yaml.org,2002:null", re.compile(r"^(?:~|null|Null|NULL|)$"), "~nN"),
    ("tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), "tTfF"),
    (
        "tag:yaml.org,2002:int",
        re.compile(r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$"),
        "-+0123456789",
    ),
    (
        "tag:yaml.org,2002:float",
        re.compile(
            r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
            r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
        ),
        "-+0123456789.",
    ),
    ("tag:yaml.org,2002:merge", re.compile(r"^<<$"), "<"),
)
_BY_FIRST: dict[str, list[tuple[str, re.Pattern[str]]]] = {}
for _tag, _regexp, _first in CORE_SCHEMA:
    for _char in _first or "":
        _BY_FIRST.setdefault(_char, []).append((_tag, _regexp))
_BY_FIRST.setdefault("", []).append((CORE_SCHEMA[0][0], CORE_SCHEMA[0][1]))


def core_tag(value: str) -> str:
    """The tag the YAML 1.2 core schema gives a plain scalar."""
    for tag, regexp in _BY_FIRST.get(value[:1], ()):
        if regexp.match(value):
            return tag
    return STR_TAG


class _CoreResolver(VersionedResolver):
    """ruamel.yaml's resolver with exactly the core schema (its own 1.2 table also reads
    `=` and timestamps, and ints with `_` or a leading 0 as octal-like)."""

    @property
    def versioned_resolver(self) -> Any:
        return _BY_FIRST


# Strings that YAML 1.1 readers (kubectl's go-yaml among them) take for something else: a
# value this module writes is quoted when it is one, so every reader sees a string.
_YAML11 = yaml.resolver.Resolver()


def _ambiguous(value: str) -> bool:
    plain = (True, False)
    return (
        _YAML11.resolve(yaml.ScalarNode, value, plain) != STR_TAG  # type: ignore[no-untyped-call]
        or core_tag(value) != STR_TAG
    )


class Problem(ValueError):
    """A document cannot be read: `line` (1-based, in the whole input) and a one-line reason."""

    def __init__(self, line: int, message: str) -> None:
        super().__init__(message)
        self.line = line
        self.message = message


class InputError(ValueError):
    """The whole input cannot be read as YAML text (UTF-16, UTF-32): one line, what to do."""


# -- splitting and decoding --------------------------------------------------------------------

_MARKER = re.compile(rb"^(---|\.\.\.)(?=[ \t\r\n]|\Z)", re.M)
# A line with YAML content: not blank, not a comment, not a directive.
_CONTENT = re.compile(
    rb"^(?![ \t]*(?:#|\r?\n|\r?\Z))(?!%)(?!(?:---|\.\.\.)(?:[ \t\r\n]|\Z))", re.M
)
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ufffe\uffff]")
_BOMS = (
    (b"\x00\x00\xfe\xff", "UTF-32"),
    (b"\xff\xfe\x00\x00", "UTF-32"),
    (b"\xfe\xff", "UTF-16"),
    (b"\xff\xfe", "UTF-16"),
)
UTF8_BOM = b"\xef\xbb\xbf"


@dataclass(frozen=True)
class Chunk:
    """One document's bytes (with its marker lines and comments), where it starts, and its
    number (1-based; 0 for a stretch of only comments that is no document)."""

    raw: bytes
    start_line: int  # the input's line of its first byte (1-based)
    line: int  # its first content line (else its `---` line, else start_line): for messages
    index: int

    def input_line(self, line_in_chunk: int) -> int:
        """The input's line (1-based) of a 0-based line within the chunk."""
        return self.start_line + line_in_chunk


def check_encoding(data: bytes, name: str) -> None:
    """Refuse input that is no UTF-8 text at all (UTF-16, UTF-32, binary) at once, naming the
    line; a document that is not UTF-8 (e.g. Latin-1) is found per document by decode()."""
    found = next((enc for bom, enc in _BOMS if data.startswith(bom)), None)
    head = data[:64][: len(data[:64]) // 2 * 2]
    if found is None and len(head) >= 4:
        even, odd = head[0::2], head[1::2]
        if (
            odd.count(0) == len(odd)
            and 0 not in even
            or even.count(0) == len(even)
            and (0 not in odd)
        ):
            found = "UTF-16"  # no byte-order mark, but ASCII with every other byte NUL
    if found is not None:
        raise InputError(
            f"{name}:1: the input is {found} text; sidecar-debug reads UTF-8 (as kubectl does): "
            f"convert it first, e.g. `iconv -f {found} -t UTF-8 {name}`"
        )
    nul = data.find(b"\x00")
    if nul >= 0:
        line = data.count(b"\n", 0, nul) + 1
        raise InputError(
            f"{name}:{line}: the input is binary data (a NUL byte), not "
            "YAML text; give the manifest file"
        )


def split(data: bytes) -> list[Chunk]:
    """The documents of a YAML stream, as byte ranges that add up to `data` exactly."""
    chunks: list[Chunk] = []
    start, has_marker, index, line = 0, False, 0, 1

    def close(end: int) -> None:
        nonlocal start, index, line
        raw = data[start:end]
        content = _CONTENT.search(raw)
        document = has_marker or content is not None
        if document:
            index += 1
        found = content or _MARKER.search(raw)
        first = line + raw.count(b"\n", 0, found.start()) if found else line
        chunks.append(Chunk(raw, line, first, index if document else 0))
        line += raw.count(b"\n")
        start = end

    for match in _MARKER.finditer(data):
        pos = match.start()
        if match.group(1) == b"---":
            if pos > start and (has_marker or _CONTENT.search(data, start, pos)):
                close(pos)
            has_marker = True
        else:
            end = data.find(b"\n", pos)
            close(len(data) if end < 0 else end + 1)
            has_marker = False
    if start < len(data):
        close(len(data))
    return chunks


def has_content(chunk: Chunk) -> bool:
    """The document has a line of YAML content: not only its `---` marker, comments and blank
    lines (such a document is null, and kubectl skips it as no object)."""
    return chunk.index > 0 and _CONTENT.search(chunk.raw) is not None


def decode(chunk: Chunk) -> str:
    """The chunk as text; Problem naming the line of the first byte that is not UTF-8 text."""
    try:
        text = chunk.raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = chunk.input_line(chunk.raw.count(b"\n", 0, exc.start))
        byte = chunk.raw[exc.start]
        raise Problem(
            line,
            f"not UTF-8 text (byte 0x{byte:02X}; Latin-1 or another 8-bit encoding?): convert "
            "the file to UTF-8, e.g. `iconv -f LATIN1 -t UTF-8`",
        ) from None
    control = _CONTROL.search(text)
    if control is not None:
        line = chunk.input_line(text.count("\n", 0, control.start()))
        raise Problem(
            line,
            f"not YAML text: control character U+{ord(control.group()):04X}, which YAML forbids",
        )
    return text


# -- the fast pass: libyaml events --------------------------------------------------------------

_FastLoader: type[Any] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _one_line(exc: yaml.MarkedYAMLError | RuamelYAMLError) -> str:
    parts = [getattr(exc, "context", None), getattr(exc, "problem", None)]
    text = ", ".join(str(p) for p in parts if p) or str(exc).splitlines()[0]
    return " ".join(text.split())


def _key_identity(event: Any) -> tuple[str, str]:
    if event.style is None and event.implicit[0]:
        return core_tag(event.value), event.value
    return event.tag or STR_TAG, event.value


# How many nodes YAML aliases may add to a document beyond its own: a Pod that reuses an env
# list or a probe through anchors stays far below; a "billion laughs" (a few hundred bytes that
# expand to 10^9 nodes) is refused before anything walks it. kubectl refuses such documents too
# ("excessive aliasing").
ALIAS_NODE_BUDGET = 10_000


def _aliases_problem(line: int, anchor: str, recursive: bool) -> Problem:
    if recursive:
        return Problem(
            line,
            f"the YAML alias *{anchor} refers to the node that contains it: recursive data "
            "cannot be a Kubernetes object; write the document without that alias",
        )
    return Problem(
        line,
        f"YAML aliases (here *{anchor}) expand this document by more than {ALIAS_NODE_BUDGET} "
        "nodes (a \"billion laughs\"?); refused, as kubectl refuses excessive aliasing: write "
        "the document without anchors and aliases",
    )


def scan(text: str, chunk: Chunk, *, max_depth: int | None = None,
         duplicates: bool = True) -> str | None:
    """The document's top-level `kind` (None when it has none); Problem on a syntax error, a
    duplicate key (unless `duplicates` is false: the caller reports them its own way),
    collections nested deeper than `max_depth`, or aliases that expand it beyond
    ALIAS_NODE_BUDGET, with the input's line. Builds no Python objects: its time is linear in
    the text, whatever the aliases expand to (the budget of every YAML loader: offline inject,
    `guard check`, policy files)."""
    # Each open collection: [is a mapping, expecting a key next, {key: its line}, nodes in it
    # (aliases expanded), its anchor].
    stack: list[list[Any]] = []
    kind: str | None = None
    last_key: str | None = None
    sizes: dict[str, int] = {}  # anchor -> nodes of the anchored node, aliases expanded
    own = added = 0  # nodes written in the document; nodes aliases add to it
    try:
        event: Any
        for event in yaml.parse(text, Loader=_FastLoader):
            cls = event.__class__
            if cls is yaml.MappingEndEvent or cls is yaml.SequenceEndEvent:
                closed = stack.pop()
                if stack:
                    stack[-1][3] += closed[3]
                if closed[4] is not None:
                    sizes[closed[4]] = closed[3]
                continue
            if cls not in (
                yaml.ScalarEvent,
                yaml.MappingStartEvent,
                yaml.SequenceStartEvent,
                yaml.AliasEvent,
            ):
                continue
            if cls is yaml.AliasEvent:
                line = chunk.input_line(event.start_mark.line)
                if any(entry[4] == event.anchor for entry in stack):
                    raise _aliases_problem(line, event.anchor, recursive=True)
                nodes = sizes.get(event.anchor, 1)
                added += nodes
                if added > ALIAS_NODE_BUDGET + own:
                    raise _aliases_problem(line, event.anchor, recursive=False)
            else:
                own += 1
                nodes = 1
                if cls is yaml.ScalarEvent and event.anchor is not None:
                    sizes[event.anchor] = 1
            if stack and cls is not yaml.MappingStartEvent and cls is not yaml.SequenceStartEvent:
                stack[-1][3] += nodes
            if stack and stack[-1][0]:
                parent = stack[-1]
                if parent[1]:  # a key
                    parent[1] = False
                    if cls is yaml.MappingStartEvent or cls is yaml.SequenceStartEvent:
                        shape = "mapping" if cls is yaml.MappingStartEvent else "list"
                        raise Problem(
                            chunk.input_line(event.start_mark.line),
                            f"a mapping key is a {shape}; Kubernetes objects need text keys "
                            "(an unrendered template such as {{ .Value }}?)",
                        )
                    if cls is yaml.ScalarEvent and event.value != "<<":
                        identity = _key_identity(event)
                        first = parent[2].get(identity)
                        if first is not None and duplicates:
                            raise Problem(
                                chunk.input_line(event.start_mark.line),
                                f"duplicate key {event.value!r} in a mapping (first at line "
                                f"{chunk.input_line(first)}); kubectl refuses it: keep one",
                            )
                        parent[2][identity] = event.start_mark.line
                        if len(stack) == 1:
                            last_key = event.value
                else:
                    parent[1] = True
                    if len(stack) == 1 and last_key == "kind" and cls is yaml.ScalarEvent:
                        kind = event.value
            if max_depth is not None and len(stack) >= max_depth and (
                    cls is yaml.MappingStartEvent or cls is yaml.SequenceStartEvent):
                raise Problem(chunk.input_line(event.start_mark.line),
                              f"lists and mappings nested more than {max_depth} deep")
            if cls is yaml.MappingStartEvent:
                stack.append([True, True, {}, 1, event.anchor])
            elif cls is yaml.SequenceStartEvent:
                stack.append([False, False, None, 1, event.anchor])
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        if exc.context_mark is not None and (mark is None or mark.index >= len(text.rstrip())):
            mark = exc.context_mark  # e.g. an unclosed `[`: where it opened, not the end
        line = chunk.input_line(mark.line if mark is not None else 0)
        raise Problem(line, f"not valid YAML: {_one_line(exc)}") from None
    except yaml.YAMLError as exc:
        raise Problem(chunk.line, f"not valid YAML: {' '.join(str(exc).split())}") from None
    return kind


# -- the round trip ---------------------------------------------------------------------------

_PREFIX = re.compile(r"\A(?:[ \t]*(?:#[^\n]*)?\r?\n|%[^\n]*\n)*---[ \t]*(?:#[^\n]*)?\r?\n")
_SUFFIX = re.compile(r"^\.\.\.[^\n]*\n?\Z", re.M)


@dataclass
class Document:
    """A document read for a round trip: `tree` (ruamel's, with comments) and the verbatim text
    around it (leading comments and `---`, a final `...`)."""

    tree: Any
    prefix: str
    body: str
    suffix: str


class _NullRepresenter(RoundTripRepresenter):
    """Writes null as `null` (ruamel writes nothing), for documents that spell it so."""

    def represent_none(self, data: Any) -> Any:
        return self.represent_scalar("tag:yaml.org,2002:null", "null")


_NullRepresenter.add_representer(type(None), _NullRepresenter.represent_none)
_SPELLED_NULL = re.compile(r"^[^#\n]*:[ \t]+(?:null|Null|NULL|~)[ \t]*(?:#.*)?$", re.M)


def _yaml(body: str = "") -> YAML:
    rt = YAML(typ="rt", pure=True)
    rt.Resolver = _CoreResolver
    if _SPELLED_NULL.search(body):
        # ruamel cannot tell `key:` from `key: null`; follow the document's spelling.
        rt.Representer = _NullRepresenter
    rt.preserve_quotes = True
    rt.width = 1_000_000  # never fold a long line the input did not fold
    mapping, offset = guess_indent(body)
    rt.indent(mapping=mapping, sequence=offset + 2, offset=offset)
    return rt


def parts(text: str) -> tuple[str, str, str]:
    """(leading comments and `---` line, the document, a final `...` line) of a chunk."""
    prefix_match = _PREFIX.match(text)
    prefix = prefix_match.group() if prefix_match else ""
    rest = text[len(prefix) :]
    suffix_match = _SUFFIX.search(rest)
    suffix = suffix_match.group() if suffix_match else ""
    return prefix, rest[: len(rest) - len(suffix)], suffix


def fast_load(body: str) -> Any:
    """The document as plain data, read by libyaml with the core schema (as to_plain(load())
    reads it); None when libyaml's safe constructors cannot (e.g. a custom tag): the caller
    then takes the round trip's reading."""
    try:
        return yaml.load(body, Loader=_CheckLoader)  # noqa: S506 - a SafeLoader
    except (yaml.YAMLError, ValueError, TypeError):
        return None


def compose(body: str) -> Any:
    """The document's node tree as libyaml composes it (each node with its start mark): where
    things are, for messages; None when it cannot (the scan has read it already, so rare)."""
    try:
        return yaml.compose(body, Loader=_FastLoader)
    except yaml.YAMLError:
        return None


class _FastDumper(getattr(yaml, "CSafeDumper", yaml.SafeDumper)):  # type: ignore[misc]
    def ignore_aliases(self, data: Any) -> bool:
        return True  # never write anchors the input did not have


def fast_write(body: str, old: Any, new: Any) -> str | None:
    """The changed lines spliced into `body`, found by writing `old` and `new` with libyaml
    (no comments, its own quoting: only the lines around the change must align); None when the
    document's block sequences are indented (libyaml writes them at the key's column), the
    splice cannot be placed, or the result does not read back as `new`. Then write() (the
    round trip) is used."""
    mapping, offset = guess_indent(body)
    if offset:
        return None

    def render(data: Any) -> str:
        return str(
            yaml.dump(
                data, Dumper=_FastDumper, sort_keys=False, default_flow_style=False,
                width=1_000_000, indent=mapping, allow_unicode=True,
            )
        )

    before, after = render(old), render(new)
    if "\r\n" in body:
        before, after = before.replace("\n", "\r\n"), after.replace("\n", "\r\n")
    spliced = splice(body, before, after)
    return spliced if spliced is not None and _reads_as(spliced, new) else None


def load(text: str, chunk: Chunk) -> Document:
    """The document for a round trip; Problem (with the input's line) if ruamel cannot read
    it (the fast pass has seen it already, so this is rare)."""
    prefix, body, suffix = parts(text)
    try:
        tree = _yaml().load(body)
    except RuamelYAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        offset = prefix.count("\n") + (mark.line if mark is not None else 0)
        raise Problem(chunk.input_line(offset), f"not valid YAML: {_one_line(exc)}") from None
    return Document(tree, prefix, body, suffix)


def _render(document: Document) -> str:
    out = io.StringIO()
    _yaml(document.body).dump(document.tree, out)
    return out.getvalue()


def write(document: Document, old: Any, new: Any) -> str:
    """The document's text with `document.tree` (read as `old`) changed into `new`.

    ruamel.yaml writes a whole document with one indentation and its own spacing in flow
    collections, so the changed lines are spliced into the original text instead: the lines
    ruamel writes for the unchanged tree are aligned with the original's, and only the hunks
    between that and the changed tree's lines are applied, at the aligned places. The result
    is read back (libyaml, core schema) and must be `new`; if the splice cannot be placed or
    reads differently, ruamel's whole document is written instead (also checked)."""
    before = _render(document)
    document.tree = merge(document.tree, old, new)
    after = _render(document)
    newline = "\r\n" if "\r\n" in document.body else "\n"
    if newline != "\n":
        before, after = before.replace("\n", newline), after.replace("\n", newline)
    spliced = splice(document.body, before, after)
    for body in (spliced, after):
        if body is not None and _reads_as(body, new):
            return document.prefix + body + document.suffix
    raise ValueError("the injected document does not read back as the injected object")


def splice(original: str, before: str, after: str) -> str | None:
    """`original` with the line hunks that turn `before` into `after` applied where `before`'s
    lines align with `original`'s; None when a hunk touches a line that does not align.

    Lines align by their content without indentation, so a document that indents some lists
    otherwise than the emitter still aligns; each inserted line is shifted by the difference of
    indentation of the nearest aligned line at its own depth (a sibling)."""
    if original and not original.endswith("\n"):
        original += "\n"
    o_lines = original.splitlines(keepends=True)
    b_lines = before.splitlines(keepends=True)
    a_lines = after.splitlines(keepends=True)
    aligned: dict[int, int] = {}  # line of `before` -> the same line of `original`
    matcher = difflib.SequenceMatcher(
        None, [line.strip() for line in o_lines], [line.strip() for line in b_lines],
        autojunk=False,
    )
    for tag, i1, i2, j1, _ in matcher.get_opcodes():
        if tag == "equal":
            aligned.update((j1 + k, i1 + k) for k in range(i2 - i1))

    def shift(j_low: int, j_high: int, like: str) -> int:
        """Indentation difference of the aligned line nearest to before[j_low:j_high] that is
        a sibling of `like` (same indentation in `before`, both list items or both keys); 0
        when there is none."""
        width, item = _indent(like), like.lstrip(" ").startswith("-")
        for distance in range(1, len(b_lines) + 1):
            for j in (j_low - distance, j_high - 1 + distance):
                if 0 <= j < len(b_lines) and j in aligned and b_lines[j].strip():
                    line = b_lines[j]
                    if _indent(line) == width and line.lstrip(" ").startswith("-") == item:
                        return _indent(o_lines[aligned[j]]) - width
            if j_low - distance < 0 and j_high - 1 + distance >= len(b_lines):
                break
        return 0

    out: list[str] = []
    done = 0  # lines of `original` already copied or replaced
    hunks = difflib.SequenceMatcher(None, b_lines, a_lines, autojunk=False).get_opcodes()
    for tag, j1, j2, k1, k2 in hunks:
        if tag == "equal":
            continue
        if j2 > j1:  # lines of `before` replaced or deleted: they must align, in one run
            places = [aligned.get(j) for j in range(j1, j2)]
            first = places[0]
            if first is None or places != list(range(first, first + len(places))):
                return None
            start, end = first, first + len(places)
            delta = _indent(o_lines[first]) - _indent(b_lines[j1])
        else:
            if j1 in aligned:  # an insertion before line j1
                start = end = aligned[j1]
            elif j1 - 1 in aligned:
                start = end = aligned[j1 - 1] + 1
            elif j1 == 0 or j1 == len(b_lines):
                start = end = 0 if j1 == 0 else len(o_lines)
            else:
                return None
            delta = shift(j1, j1, a_lines[k1]) if k2 > k1 else 0
        inserted = [_reindent(line, delta) for line in a_lines[k1:k2]]
        if None in inserted:
            return None
        if j2 == j1 and inserted:
            # Comment lines right above an insertion, at its indentation, describe the line
            # they stood above (ruamel keeps them over the inserted item): insert above them.
            head = str(inserted[0])
            indent = head[: _indent(head)]
            while start > done and _is_comment_at(o_lines[start - 1], indent):
                start = end = start - 1
        if start < done:
            return None
        out += o_lines[done:start]
        out += [str(line) for line in inserted]
        done = end
    out += o_lines[done:]
    return "".join(out)


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _reindent(line: str, delta: int) -> str | None:
    if delta >= 0 or not line.strip():
        return " " * delta + line if line.strip() else line
    return line[-delta:] if _indent(line) >= -delta else None


def _is_comment_at(line: str, indent: str) -> bool:
    return line.startswith(indent + "#")


class _CheckLoader(_FastLoader):  # type: ignore[misc]
    """libyaml with the core schema, to read a written document back."""

    yaml_implicit_resolvers: dict[Any, Any] = {}

    def construct_core_int(self, node: Any) -> int:
        value = str(self.construct_scalar(node))
        return int(value, 0) if value[1:2] in ("o", "x") else int(value, 10)


for _tag, _regexp, _first in CORE_SCHEMA:
    _CheckLoader.add_implicit_resolver(_tag, _regexp, list(_first) or [""])
_CheckLoader.add_implicit_resolver(CORE_SCHEMA[0][0], CORE_SCHEMA[0][1], [""])
_CheckLoader.add_constructor("tag:yaml.org,2002:int", _CheckLoader.construct_core_int)


def _reads_as(text: str, expected: Any) -> bool:
    """`text` reads as `expected`, types included (Python's == takes 1 for True and 1.0)."""
    try:
        found = yaml.load(text, Loader=_CheckLoader)  # noqa: S506 - a SafeLoader
    except yaml.YAMLError:
        return False
    try:
        return json.dumps(found, sort_keys=True, default=repr) == json.dumps(
            expected, sort_keys=True, default=repr
        ) and bool(found == expected)
    except (TypeError, ValueError):  # keys of mixed types cannot be sorted
        return bool(found == expected)


def guess_indent(text: str) -> tuple[int, int]:
    """(mapping indent, dash offset of block sequences) as the text writes them; kubectl's
    (2, 0) when it shows neither."""
    mapping: int | None = None
    offset: int | None = None
    key_indent: int | None = None  # column of the key on the previous line, if it ends in ':'
    for line in text.splitlines():
        stripped = line.lstrip(" ")
        if not stripped or stripped.startswith("#"):
            continue
        column = len(line) - len(stripped)
        if key_indent is not None:
            if stripped.startswith("- ") and column >= key_indent:
                offset = column - key_indent if offset is None else offset
            elif column > key_indent:
                mapping = column - key_indent if mapping is None else mapping
        if mapping is not None and offset is not None:
            break
        while stripped.startswith("- "):  # "- name:" opens a mapping where "name" starts
            rest = stripped[2:].lstrip(" ")
            column += len(stripped) - len(rest)
            stripped = rest
        head = stripped.split(" #", 1)[0].rstrip()
        key_indent = column if head.endswith(":") and head[0] not in "'\"{[" else None
    return mapping or 2, offset or 0


def to_plain(node: Any) -> Any:
    """ruamel's tree as plain dicts, lists, str, int, float, bool and None."""
    if isinstance(node, dict):
        return {to_plain(k): to_plain(v) for k, v in node.items()}
    if isinstance(node, list):
        return [to_plain(v) for v in node]
    if isinstance(node, bool) or node is None:
        return node
    if isinstance(node, int):
        return bool(node) if type(node).__name__ == "ScalarBoolean" else int(node)
    if isinstance(node, float):
        return float(node)
    if isinstance(node, str):
        return str(node)
    value = getattr(node, "value", None)  # a TaggedScalar (a custom tag): its text
    return str(value) if value is not None else node


def to_node(value: Any) -> Any:
    """A plain value to write: block-style collections, strings every reader takes as such."""
    if isinstance(value, dict):
        mapping = CommentedMap()
        for key, item in value.items():
            mapping[key] = to_node(item)
        return mapping
    if isinstance(value, list):
        return CommentedSeq(to_node(v) for v in value)
    if isinstance(value, str) and _ambiguous(value):
        return SingleQuotedScalarString(value)
    return value


def _element_key(value: Any) -> str:
    """What aligns list elements: a container, volume, env var or mount by its name (and
    path), anything else by its whole value."""
    if isinstance(value, dict):
        ident = {k: value[k] for k in ("name", "mountPath") if k in value}
        if ident:
            return json.dumps(ident, sort_keys=True, default=str)
    return json.dumps(value, sort_keys=True, default=str)


def merge(node: Any, old: Any, new: Any) -> Any:
    """Change ruamel's `node` (read as `old`) into `new` in place, touching only what differs:
    untouched keys and items keep their comments and styles. Returns the node to store."""
    if old is new or (type(old) is type(new) and old == new):
        return node
    anchor = getattr(node, "anchor", None)
    if isinstance(node, (dict, list)) and anchor is not None and anchor.value is not None:
        # An anchored node may be aliased elsewhere (`*name`, `<<: *name`), where it must stay
        # as it was: change a copy (comments kept, no anchor); an alias left alone is then
        # written out in full.
        node = copy.deepcopy(node)
        node.yaml_set_anchor(None)
    if isinstance(node, dict) and isinstance(old, dict) and isinstance(new, dict):
        added = False
        for key in [k for k in node if to_plain(k) not in new]:
            del node[key]
        for key, value in new.items():
            if key in old and key in node:
                merged = merge(node[key], old[key], value)
                if merged is not node[key]:
                    node[key] = merged
            else:
                node[key] = to_node(value)
                added = True
        if added and isinstance(node, CommentedMap):
            node.fa.set_block_style()  # `{name: a}` + annotations: one key per line
        return node
    if isinstance(node, list) and isinstance(old, list) and isinstance(new, list):
        length = len(node)
        matcher = difflib.SequenceMatcher(
            None, [_element_key(v) for v in old], [_element_key(v) for v in new], autojunk=False
        )
        for tag, i1, i2, j1, j2 in reversed(matcher.get_opcodes()):
            pairs = min(i2 - i1, j2 - j1) if tag in ("equal", "replace") else 0
            for k in range(pairs):
                merged = merge(node[i1 + k], old[i1 + k], new[j1 + k])
                if merged is not node[i1 + k]:
                    node[i1 + k] = merged
            for _ in range(i2 - i1 - pairs):
                del node[i1 + pairs]
            for k, value in enumerate(new[j1 + pairs : j2]):
                node.insert(i1 + pairs + k, to_node(value))
        if len(node) > length and isinstance(node, CommentedSeq):
            node.fa.set_block_style()  # `[]` or `[a]` + new items: one item per line
        return node
    return to_node(new)


def dump_plain(value: Any) -> str:
    """A plain value as a block YAML document as kubectl writes one (2-space mappings, dashes
    at the key's column), key order kept, every string read back as a string (`inject -o yaml`
    of JSON input)."""
    out = io.StringIO()
    _yaml().dump(to_node(value), out)
    return out.getvalue()


def plain_documents(data: bytes) -> list[Any]:
    """Every document of a YAML stream as plain data (the core schema, as inject reads it);
    those that cannot be read are left out (inject has reported them already)."""
    if data.startswith(UTF8_BOM):
        data = data[len(UTF8_BOM) :]
    found: list[Any] = []
    for chunk in split(data):
        if not chunk.index:
            continue
        try:
            text = decode(chunk)
            _, body, _ = parts(text)
            plain = fast_load(body)
            if plain is None:
                plain = to_plain(load(text, chunk).tree)
        except Problem:
            continue
        if plain is not None:
            found.append(plain)
    return found
