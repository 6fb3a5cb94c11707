"""Debug files by GNU build-id, for the binaries of the app that carry no symbol table: first
the toolset's own debug directories (/usr/lib/debug/.build-id/xx/rest.debug: libc6-dbg in the
image), then the debuginfod servers of DEBUGINFOD_URLS (the chart's `toolset.debuginfod`, off by
default), whose answers are kept in a cache in the toolset's private directory.

A debuginfod server is outside our trust, as the app is: what it sends is capped in size
(DEBUGINFOD_MAXSIZE bytes) and time (DEBUGINFOD_MAXTIME seconds) per binary, must be an ELF file
of the very build-id asked for and carry a symbol table, and reaches the cache only through a
new file (O_NOFOLLOW|O_EXCL) renamed into place once checked. A build-id the servers do not
have (or refused) is not asked again for MISS_SECONDS. Same build-id, same code: the names are
right whoever mapped the file. The protocol: GET $URL/buildid/HEXID/debuginfo.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import stat
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field

import elf_frames
import toolset_common as common

DEBUG_DIRS = ("/usr/lib/debug/.build-id",)
URLS_ENV = "DEBUGINFOD_URLS"  # elfutils' names, so that the same settings work with its tools
MAXSIZE_ENV = "DEBUGINFOD_MAXSIZE"
MAXTIME_ENV = "DEBUGINFOD_MAXTIME"
DEFAULT_MAXSIZE = 512 << 20
DEFAULT_MAXTIME = 30.0
MAX_MAXSIZE = 16 << 30  # the webhook's bounds (webhook/config.py)
MAX_MAXTIME = 600
# All fetches of one recording together: a profile touching many stripped libraries of a slow
# server waits at most this many times the per-binary time.
BUDGET_FACTOR = 3
MISS_SECONDS = 600  # elfutils' cache_miss_s
# The cache holds at most this many times DEBUGINFOD_MAXSIZE: it is on the toolset's own
# filesystem, which counts towards the pod's ephemeral storage.
CACHE_FACTOR = 2
CACHE_DIR = "debuginfod"
DSO_LIMIT = 1 << 32
CHUNK = 1 << 16
BUILD_ID = re.compile(r"[0-9a-f]{4,80}")
PART_FLAGS = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass
class Config:
    urls: tuple[str, ...] = ()
    max_size: int = DEFAULT_MAXSIZE
    max_time: float = DEFAULT_MAXTIME
    problems: list[str] = field(default_factory=list)  # settings that were ignored, and why


def config(environ: Mapping[str, str]) -> Config:
    """The debuginfod settings of the toolset's environment; a bad value is ignored with a
    problem that says so (the webhook validated them; the env may still be hand-made)."""
    found = Config()
    for url in (environ.get(URLS_ENV) or "").split():
        parsed = urllib.parse.urlsplit(url)
        if parsed.scheme in ("http", "https") and parsed.netloc and url.isprintable():
            found.urls += (url.rstrip("/"),)
        else:
            found.problems.append(f"{URLS_ENV}: {common.printable(url)[:100]} is not an http(s) "
                                  "URL: not used")
    for name, attribute, kind, limit in ((MAXSIZE_ENV, "max_size", int, MAX_MAXSIZE),
                                         (MAXTIME_ENV, "max_time", float, MAX_MAXTIME)):
        text = environ.get(name)
        if not text:
            continue
        try:
            value = kind(text)
        except ValueError:
            value = 0
        if 0 < value <= limit:
            setattr(found, attribute, value)
        else:
            found.problems.append(f"{name}={common.printable(text)[:40]} is not a number in "
                                  f"(0, {limit}]: {getattr(found, attribute)} used")
    return found


class Refused(Exception):
    """What a server sent is not a debug file this toolset uses: the reason, for the user."""


def load_checked(fd: int, build_id: str, name: str) -> elf_frames.ElfFile:
    """The debug file open at `fd` when it is what we asked for: an ELF file of `build_id`
    with a symbol table."""
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        raise Refused(f"{name} is a {common.file_kind(info.st_mode)}")
    try:
        elf = elf_frames.load(fd, info.st_size, name, DSO_LIMIT)
    except elf_frames.ElfError as error:
        raise Refused(str(error)) from error
    got = elf.build_id()
    if got != build_id:
        raise Refused(f"it is the debug file of build-id {got or 'none'}, not {build_id}")
    if not elf.has_symtab:
        raise Refused("it has no symbol table")
    return elf


def evict(cache_fd: int, keep: int) -> None:
    """Remove the least recently used debug files of the cache until the rest weigh at most
    `keep` bytes (misses and files being written stay)."""
    entries = []
    with os.scandir(cache_fd) as found:
        for entry in found:
            if entry.name.endswith(".debug") and entry.is_file(follow_symlinks=False):
                info = entry.stat(follow_symlinks=False)
                entries.append((info.st_mtime, info.st_size, entry.name))
    total = sum(size for _, size, _ in entries)
    for _, size, name in sorted(entries):
        if total <= keep:
            break
        with contextlib.suppress(OSError):
            os.unlink(name, dir_fd=cache_fd)
            total -= size


class DebugInfo:
    """Finds debug files for the binaries of one recording (see the module's text)."""

    def __init__(self, environ: Mapping[str, str] | None = None,
                 dirs: tuple[str, ...] = DEBUG_DIRS, cache: str | None = None) -> None:
        self.config = config(os.environ if environ is None else environ)
        self.dirs = dirs
        self._cache = cache
        self.found: dict[str, str] = {}  # binary -> where its names came from
        self.problems: list[str] = list(self.config.problems)
        self.budget = self.config.max_time * BUDGET_FACTOR
        self._memo: dict[str, elf_frames.ElfFile | None] = {}

    def find(self, build_id: str, binary: str) -> elf_frames.ElfFile | None:
        """The debug file of `build_id` (the binary `binary`, for messages), or None."""
        if not BUILD_ID.fullmatch(build_id):
            return None
        if build_id not in self._memo:
            self._memo[build_id] = self._find(build_id, os.path.basename(binary))
        return self._memo[build_id]

    def _find(self, build_id: str, label: str) -> elf_frames.ElfFile | None:
        relative = os.path.join(build_id[:2], build_id[2:] + ".debug")
        for directory in self.dirs:
            elf = self._local(os.path.join(directory, relative), build_id)
            if elf is not None:
                self.found[label] = "debug-dir"
                return elf
        if not self.config.urls:
            return None
        cache_fd = self._cache_dir()
        if cache_fd is None:
            return None
        try:
            return self._from_cache_or_servers(cache_fd, build_id, label)
        finally:
            os.close(cache_fd)

    def _local(self, path: str, build_id: str) -> elf_frames.ElfFile | None:
        """A debug file of the image (its own filesystem: no link of the app's can be there,
        and none is followed at the last step anyway)."""
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            return None
        try:
            return load_checked(fd, build_id, path)
        except (OSError, Refused):
            return None
        finally:
            os.close(fd)

    def _cache_dir(self) -> int | None:
        try:
            base = self._cache or os.path.join(common.private_base(), CACHE_DIR)
            return common.open_dir(base, create=True, mode=0o700)
        except (OSError, common.UnsafePath) as error:
            self.problems.append(f"debuginfod: no cache directory ({error}): not used")
            self.config.urls = ()
            return None

    def _from_cache_or_servers(self, cache_fd: int, build_id: str,
                               label: str) -> elf_frames.ElfFile | None:
        name = build_id + ".debug"
        try:
            fd = common.open_regular(name, cache_fd)
        except FileNotFoundError:
            pass
        except (OSError, common.UnsafePath) as error:
            self.problems.append(f"debuginfod cache: {error}: not used for {label}")
            return None
        else:
            try:
                elf = load_checked(fd, build_id, name)
                self.found[label] = "debuginfod (cached)"
                with contextlib.suppress(OSError):
                    os.utime(fd)  # recently used: evicted last
                return elf
            except (OSError, Refused):
                with contextlib.suppress(OSError):
                    os.unlink(name, dir_fd=cache_fd)  # not what it must be: fetched again
            finally:
                os.close(fd)
        miss = build_id + ".miss"
        with contextlib.suppress(OSError):
            if time.time() - os.stat(miss, dir_fd=cache_fd, follow_symlinks=False).st_mtime \
                    < MISS_SECONDS:
                return None
        reasons = []
        for url in self.config.urls:
            if self.budget <= 0:
                # Not the servers' answer: asked again by the next recording.
                self.problems.append(f"debuginfod: not asked for {common.printable(label)}: "
                                     "this recording's time for debuginfod is used up")
                return None
            try:
                fetched = self._fetch(cache_fd, url, build_id, name)
            except Refused as refused:
                reasons.append(f"{url}: {refused}")
                continue
            if fetched is not None:
                self.found[label] = "debuginfod"
                return fetched
        if reasons:
            self.problems.append(f"debuginfod: no debug file for {common.printable(label)} "
                                 f"(build-id {build_id}): {'; '.join(reasons)}")
        with contextlib.suppress(OSError, common.UnsafePath):
            os.close(common.create_file(cache_fd, miss, 0o600))
        return None

    def _fetch(self, cache_fd: int, url: str, build_id: str,
               name: str) -> elf_frames.ElfFile | None:
        """GET the debug file into a new file of the cache, check it, rename it into place.
        None when the server has no such file (404); Refused for anything else."""
        started = time.monotonic()
        limit = min(self.config.max_time, self.budget)
        deadline = started + limit
        size_cap = self.config.max_size
        request = urllib.request.Request(  # noqa: S310 - config() keeps http(s) URLs only
            f"{url}/buildid/{build_id}/debuginfo",
            headers={"User-Agent": "sidecar-debug-toolset"})
        part = f".{build_id}.{secrets.token_hex(6)}.part"
        fd = -1
        try:
            try:
                response = urllib.request.urlopen(request, timeout=limit)  # noqa: S310
            except urllib.error.HTTPError as error:
                error.close()
                if error.code == 404:
                    return None
                raise Refused(f"HTTP {error.code}") from None
            except (urllib.error.URLError, OSError, ValueError) as error:
                reason = getattr(error, "reason", error)
                raise Refused(f"cannot fetch ({common.printable(str(reason))[:200]})") from None
            with response:
                length = response.headers.get("Content-Length")
                if length is not None and length.isdigit() and int(length) > size_cap:
                    raise Refused(f"its debug file has {int(length) >> 20} MiB, more than "
                                  f"{MAXSIZE_ENV} ({size_cap >> 20} MiB)")
                # Read back to be checked: O_RDWR, never through a link, never an old file.
                fd = os.open(part, PART_FLAGS, 0o600, dir_fd=cache_fd)
                written = 0
                while True:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        raise Refused(f"not sent within {limit:g} s ({MAXTIME_ENV})")
                    with contextlib.suppress(AttributeError, OSError):
                        response.fp.raw._sock.settimeout(remaining)
                    try:
                        # read1: what has come (read waits for all it asked for)
                        chunk = response.read1(min(CHUNK, size_cap + 1 - written))
                    except (OSError, TimeoutError):
                        raise Refused(f"not sent within {limit:g} s ({MAXTIME_ENV})") from None
                    if not chunk:
                        break
                    written += len(chunk)
                    if written > size_cap:
                        raise Refused(f"it sent more than {MAXSIZE_ENV} "
                                      f"({size_cap >> 20} MiB)")
                    view = memoryview(chunk)
                    while view:
                        view = view[os.write(fd, view):]
            elf = load_checked(fd, build_id, "what it sent")
            evict(cache_fd, CACHE_FACTOR * size_cap - written)
            os.rename(part, name, src_dir_fd=cache_fd, dst_dir_fd=cache_fd)
            part = ""
            return elf
        except (OSError, common.UnsafePath) as error:
            raise Refused(f"cannot keep its debug file ({error})") from None
        finally:
            self.budget -= time.monotonic() - started
            if fd >= 0:
                os.close(fd)
            if part:
                with contextlib.suppress(OSError):
                    os.unlink(part, dir_fd=cache_fd)
