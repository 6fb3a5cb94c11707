"""Copy results from the pod to the workstation without trusting the pod.

What the pod sends (a tar stream over exec) is written by whatever runs in that container, so it
is read like hostile input: only the names the command expects, regular files and directories
only (no links, devices or fifos), no absolute paths and no `..`, each file created exclusively
without following links, permissions reset. Everything lands in a fresh staging directory
(mkdtemp next to the destination, so the final move is a rename on the same filesystem) and is
moved into place only when the whole archive passed; an existing file is never replaced unless
the user said --force.

Sizes are capped before anything is stored: the archive arrives (base64 over exec) into a
temporary file, never all in memory, and stops at `max_bytes`; sparse members, whose few stored
bytes would expand into a huge file (a 10 KiB archive into 512 MiB), are refused, and so is an
archive whose members together declare more than `max_bytes`.
"""

from __future__ import annotations

import base64
import binascii
import os
import shutil
import tarfile
import tempfile
from collections.abc import Collection, Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import IO

# What a copy-back may bring at most, unless the command's --max-copy-bytes says otherwise.
DEFAULT_MAX_COPY_BYTES = 256 * 1024 * 1024
# Archives up to this size stay in memory while they arrive; larger ones go to a temporary file.
_SPOOL_BYTES = 8 * 1024 * 1024

FILE_MODE = 0o644
DIR_MODE = 0o755
_CHUNK = 1 << 20


class CopyError(Exception):
    """The copy was refused or failed; the message says why and what to do."""


def _too_large(limit: int) -> CopyError:
    return CopyError(
        f"the archive exceeds the {limit}-byte limit (--max-copy-bytes); copy less, or raise "
        "the limit if you expect that much"
    )


class Base64Archive:
    """The archive as base64 text arrives in chunks (exec output): decoded as it comes into a
    temporary file (in memory up to a few MiB), refused once it passes `max_bytes`."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.size = 0
        self._pending = ""
        self._file: IO[bytes] = tempfile.SpooledTemporaryFile(max_size=_SPOOL_BYTES)  # noqa: SIM115

    def feed(self, text: str) -> None:
        """Add the next chunk of base64 text (whitespace anywhere is ignored)."""
        pending = self._pending + "".join(text.split())
        whole = len(pending) - len(pending) % 4
        self._pending = pending[whole:]
        if not whole:
            return
        if self.size + whole // 4 * 3 - 2 > self.max_bytes:
            raise _too_large(self.max_bytes)
        try:
            data = base64.b64decode(pending[:whole], validate=True)
        except (ValueError, binascii.Error) as error:
            raise CopyError(f"the archive arrived damaged ({error})") from error
        self.size += len(data)
        if self.size > self.max_bytes:
            raise _too_large(self.max_bytes)
        self._file.write(data)

    def finish(self) -> IO[bytes]:
        """The decoded archive, read from its start; raises when the text ended mid-group."""
        if self._pending:
            raise CopyError(
                f"the archive arrived incomplete ({self.size} bytes and {len(self._pending)} "
                "stray base64 characters)"
            )
        self._file.seek(0)
        return self._file

    def close(self) -> None:
        self._file.close()


def _parts(name: str) -> list[str] | None:
    """The path components of an archive member name, or None when it is unsafe."""
    if not name or name.startswith("/") or "\\" in name or "\0" in name:
        return None
    parts = name.rstrip("/").split("/")
    if any(part in ("", ".", "..") for part in parts):
        return None
    return parts


def extract(
    archive: IO[bytes],
    expected: Collection[str],
    staging: Path,
    max_bytes: int = DEFAULT_MAX_COPY_BYTES,
) -> dict[str, Path]:
    """Unpack `archive` into the empty directory `staging`, refusing it as a whole if any member
    is not a regular file or directory under one of the `expected` top-level names, is sparse,
    or the members' sizes add up to more than `max_bytes`. Returns the expected names that
    arrived, with their staged paths."""
    arrived: dict[str, Path] = {}
    total = 0
    try:
        with tarfile.open(fileobj=archive, mode="r:") as tar:
            for member in tar:
                parts = _parts(member.name)
                if parts is None:
                    raise CopyError(f"unsafe path {member.name!r}")
                if parts[0] not in expected:
                    raise CopyError(f"unexpected name {member.name!r}")
                if not (member.isreg() or member.isdir()):
                    kind = (
                        "a symbolic link" if member.issym()
                        else "a hard link" if member.islnk()
                        else "a device" if member.isdev()
                        else "not a regular file"
                    )
                    raise CopyError(f"{member.name!r} is {kind}")
                if member.issparse():
                    # A few stored bytes that expand into a file of any size.
                    raise CopyError(f"{member.name!r} is a sparse file")
                total += member.size
                if total > max_bytes:
                    raise CopyError(
                        f"{member.name!r} brings the files to more than the {max_bytes}-byte "
                        "limit (--max-copy-bytes)"
                    )
                parent = staging
                for part in parts[:-1]:
                    parent = parent / part
                    if not parent.exists():
                        os.mkdir(parent, DIR_MODE)
                    elif parent.is_symlink() or not parent.is_dir():
                        raise CopyError(f"{member.name!r} is inside a file")
                target = parent / parts[-1]
                if member.isdir():
                    if not target.exists():
                        os.mkdir(target, DIR_MODE)
                    elif target.is_symlink() or not target.is_dir():
                        raise CopyError(f"{member.name!r} arrived twice")
                else:
                    _write_file(tar, member, target)
                arrived.setdefault(parts[0], staging / parts[0])
    except tarfile.TarError as error:
        raise CopyError(f"the archive arrived incomplete or damaged ({error})") from error
    return arrived


def _write_file(tar: tarfile.TarFile, member: tarfile.TarInfo, target: Path) -> None:
    source = tar.extractfile(member)
    if source is None:
        raise CopyError(f"{member.name!r} has no content")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    try:
        descriptor = os.open(target, flags, FILE_MODE)
    except FileExistsError as error:
        raise CopyError(f"{member.name!r} arrived twice") from error
    with os.fdopen(descriptor, "wb") as out:
        left = member.size
        while left > 0 and (chunk := source.read(min(_CHUNK, left))):
            out.write(chunk)
            left -= len(chunk)


def terminal_text(data: bytes, limit: int = 64 << 10) -> str:
    """Text the pod sent (a summary with the app's symbol names) as it may reach the user's
    terminal: at most `limit` bytes, undecodable bytes replaced, every control character but
    newline and tab shown escaped (no escape sequence, no carriage return overwriting a line)."""
    text = data[:limit].decode("utf-8", errors="replace")
    shown = "".join(c if c.isprintable() or c in "\n\t" else ascii(c)[1:-1] for c in text)
    if len(data) > limit:
        shown += f"\n[... {len(data) - limit} more bytes not shown]\n"
    return shown


def existing(destinations: Iterable[Path]) -> list[Path]:
    """The destinations that already exist (links too, dangling or not)."""
    return [path for path in destinations if os.path.lexists(path)]


def refuse_overwrite(destinations: Iterable[Path], force: bool) -> None:
    """Raise before any work when a destination exists and --force was not given."""
    found = existing(destinations)
    if found and not force:
        names = ", ".join(str(path) for path in found)
        raise CopyError(
            f"refusing to overwrite {names}: it exists (choose another output with -o, or pass "
            "--force to replace it)"
        )


@contextmanager
def staging_directory(near: Path) -> Iterator[Path]:
    """A fresh private directory next to `near` (created if needed), removed afterwards."""
    near.mkdir(parents=True, exist_ok=True)
    path = Path(tempfile.mkdtemp(prefix=".sidecar-debug-", dir=near))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()


def place(moves: Mapping[Path, Path], force: bool) -> None:
    """Move staged paths to their destinations. Without `force` nothing existing is replaced,
    even if it appeared since the check: files are hard-linked (fails if the name exists) and
    directories renamed onto a directory created exclusively for them."""
    refuse_overwrite(moves.values(), force)
    for source, destination in moves.items():
        destination.parent.mkdir(parents=True, exist_ok=True)
        if force and os.path.lexists(destination):
            _remove(destination)
        try:
            if source.is_dir():
                os.mkdir(destination, DIR_MODE)  # claims the name; rename replaces it if empty
                os.rename(source, destination)
            else:
                try:
                    os.link(source, destination)
                except OSError as error:
                    if isinstance(error, FileExistsError):
                        raise
                    # A filesystem without hard links: rename after the existence check.
                    if os.path.lexists(destination):
                        raise FileExistsError(str(destination)) from error
                    os.rename(source, destination)
        except FileExistsError as error:
            raise CopyError(
                f"refusing to overwrite {destination}: it appeared while copying (pass --force "
                "to replace it)"
            ) from error
        except OSError as error:
            raise CopyError(f"cannot move the copy to {destination}: {error}") from error
