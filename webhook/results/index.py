"""The store's index: one row per run, kept beside the runs, so that a page of runs, a
namespace's quota, the retention pass and a restart read the index, not every run's meta.json.

    ROOT/.index/runs.sqlite3    SQLite (the standard library's; one file, atomic commits)

The runs stay the source of truth; the index is a cache of what listing needs (names, start,
technique, samples, bytes, the few meta.json fields the page shows). It is rebuilt from the
runs when it is missing, unreadable, corrupt or of another format version (`PRAGMA
user_version`), and kept in step with runs added or removed by hand: every pod directory's
modification time is recorded, and a pod whose directory changed is read again (a restart
stats the pod directories, it reads no run). A link where the index or its directory should
be is removed, never followed. On a directory the process may not write (`results serve` of a
read-only copy) the index lives in memory.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import os
import re
import sqlite3
import stat
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from webhook.results.store import Run

log = logging.getLogger(__name__)

INDEX_DIR = ".index"
INDEX_FILE = "runs.sqlite3"
FORMAT_VERSION = 2  # PRAGMA user_version; another number: rebuilt from the runs
REFRESH_SECONDS = 10.0  # a listing looks for runs changed by hand at most this often
DEFAULT_PAGE = 100
MAX_PAGE = 1000
# The meta.json fields a listing shows (the page's columns); the rest stays in meta.json.
LIST_KEYS = ("samples", "hottest", "duration", "seconds", "outcome", "reason", "message",
             "schedule", "trigger")
_CURSOR = re.compile(r"(\d{1,12})~([A-Za-z0-9./-]{5,400})")

_SCHEMA = """
CREATE TABLE runs (
    id TEXT PRIMARY KEY,          -- NAMESPACE/POD/RUN
    namespace TEXT NOT NULL,
    pod TEXT NOT NULL,
    name TEXT NOT NULL,
    started INTEGER NOT NULL,     -- Unix seconds (UTC)
    technique TEXT NOT NULL,
    samples INTEGER NOT NULL,
    bytes INTEGER NOT NULL,
    meta TEXT NOT NULL            -- JSON: the LIST_KEYS of meta.json
);
CREATE INDEX runs_newest ON runs (started DESC, id DESC);
CREATE INDEX runs_namespace ON runs (namespace, started DESC, id DESC);
CREATE INDEX runs_pod ON runs (namespace, pod, started DESC, id DESC);
CREATE INDEX runs_technique ON runs (technique, started DESC, id DESC);
CREATE TABLE pods (
    namespace TEXT NOT NULL,
    pod TEXT NOT NULL,
    mtime INTEGER NOT NULL,       -- the pod directory's st_mtime_ns when last read
    PRIMARY KEY (namespace, pod)
);
"""


_COLUMNS = {
    "runs": ("id", "namespace", "pod", "name", "started", "technique", "samples", "bytes",
             "meta"),
    "pods": ("namespace", "pod", "mtime"),
}
_INDEXES = {"runs_newest", "runs_namespace", "runs_pod", "runs_technique"}


class QueryError(ValueError):
    """A filter or page token the index refuses; the message says which and why."""


@dataclass(frozen=True)
class Query:
    """A page of runs, newest first: filters, then at most `limit` after `cursor`."""

    namespaces: Sequence[str] | None = None  # None: all; []: none
    pod: str | None = None
    technique: str | None = None
    since: datetime | None = None  # started at or after
    until: datetime | None = None  # started before
    limit: int = DEFAULT_PAGE
    cursor: str | None = None


@dataclass(frozen=True)
class Page:
    runs: list[Run]
    next: str | None  # the page token of the next page; None on the last
    total: int  # runs matching the filters, on all pages
    remaining: int  # of those, on the pages after this one

    @property
    def first(self) -> int:
        """The position of this page's first run among all matching (1: the newest)."""
        return self.total - self.remaining - len(self.runs) + 1


def encode_cursor(started: int, run_id: str) -> str:
    return base64.urlsafe_b64encode(f"{started}~{run_id}".encode()).decode().rstrip("=")


def decode_cursor(token: str) -> tuple[int, str]:
    """(started, id) of the last run of the page before; QueryError when it is not a token
    this service wrote."""
    if not isinstance(token, str) or not 1 <= len(token) <= 600:
        raise QueryError("page token: expected the `next` token of the page before")
    try:
        text = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode("ascii")
    except (binascii.Error, ValueError):
        raise QueryError("page token: not a token this service wrote (not base64url); "
                         "start again from the first page") from None
    match = _CURSOR.fullmatch(text)
    if not match or match.group(2).count("/") != 2:
        raise QueryError("page token: not a token this service wrote; start again from the "
                         "first page")
    return int(match.group(1)), match.group(2)


def parse_moment(name: str, text: str) -> datetime:
    """A time filter: an RFC 3339 time (UTC when it names no zone) or a date (its midnight,
    UTC)."""
    try:
        if len(text) == 10:
            day = date.fromisoformat(text)
            return datetime(day.year, day.month, day.day, tzinfo=UTC)
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise QueryError(f"{name}: {text[:40]!r} is neither a date (2026-12-01) nor a time "
                         "(2026-12-01T10:00:00Z)") from None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment


def _epoch(moment: datetime) -> int:
    return int(moment.astimezone(UTC).timestamp())


class RunIndex:
    """The index of the store at `root`. Thread-safe (one connection, one lock)."""

    def __init__(self, root: Path, scan_pod: Callable[[str, str], Iterable[Run]],
                 run_bytes: Callable[[Run], int], *,
                 is_namespace: Callable[[str], bool], is_pod: Callable[[str], bool],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.root = Path(root)
        self.scan_pod = scan_pod  # the runs in ROOT/NAMESPACE/POD, read from the tree
        self.run_bytes = run_bytes
        self.is_namespace = is_namespace  # the store's name checks: other directories are
        self.is_pod = is_pod  # not runs
        self.clock = clock
        self.lock = threading.RLock()
        self.path: Path | None = None  # None: in memory
        self.rebuilds: list[str] = []  # why the index was rebuilt (missing, corrupt, version...)
        self._refreshed = float("-inf")
        self.db = self._open()
        self.refresh()

    # --- the file -------------------------------------------------------------------------

    def _open(self) -> sqlite3.Connection:
        directory = self.root / INDEX_DIR
        path = directory / INDEX_FILE
        try:
            self._own_directory(directory)
            reason = self._problem(path) or self._unusable(path)
            if reason is None:
                self.path = path
                return self._connect(path)
            self._remove(path)
            db = self._connect(path)
            self.path = path
        except (OSError, sqlite3.Error) as error:
            reason = f"cannot be written in {directory} ({error}); kept in memory"
            db = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)
            self.path = None
        self._create(db, reason)
        return db

    def _unusable(self, path: Path) -> str | None:
        """Why the index file cannot be used as it is (None: it can): not a database, another
        format version, a failed integrity check, tables or columns not this version's."""
        db: sqlite3.Connection | None = None
        try:
            db = self._connect(path)
            version = db.execute("PRAGMA user_version").fetchone()[0]
            if version != FORMAT_VERSION:
                return f"format version {version}, not {FORMAT_VERSION}"
            check = db.execute("PRAGMA quick_check").fetchone()[0]
            if check != "ok":
                return f"corrupt ({check[:200]})"
            for table, columns in _COLUMNS.items():
                found = tuple(row[1] for row in db.execute(f"PRAGMA table_info({table})"))
                if found != columns:
                    return f"table {table} is not this version's"
            names = {row[0] for row in db.execute(
                "SELECT name FROM sqlite_master WHERE type = 'index'")}
            if not _INDEXES <= names:
                return "an index of the table is missing"
        except sqlite3.DatabaseError as error:
            return f"corrupt ({error})"
        finally:
            if db is not None:
                db.close()
        return None

    @staticmethod
    def _own_directory(directory: Path) -> None:
        """ROOT/.index as a directory of ours: a link or a file there is removed, not followed."""
        try:
            info = directory.lstat()
        except FileNotFoundError:
            directory.mkdir(mode=0o700)
            return
        if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
            log.warning("results index: %s is not a directory (a link?): removed", directory)
            directory.unlink()
            directory.mkdir(mode=0o700)

    @staticmethod
    def _problem(path: Path) -> str | None:
        try:
            info = path.lstat()
        except FileNotFoundError:
            return "missing"
        if not stat.S_ISREG(info.st_mode):
            return "not a regular file (a link?)"
        return None

    @staticmethod
    def _remove(path: Path) -> None:
        for name in (path.name, path.name + "-journal"):
            try:
                (path.parent / name).unlink()
            except FileNotFoundError:
                pass

    @staticmethod
    def _connect(path: Path) -> sqlite3.Connection:
        # Autocommit mode; every change is one explicit transaction (atomic on disk through
        # SQLite's rollback journal: a crash leaves the index before or after, never between).
        db = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=10)
        db.execute("PRAGMA journal_mode=DELETE")
        db.execute("PRAGMA synchronous=NORMAL")
        return db

    def _create(self, db: sqlite3.Connection, reason: str) -> None:
        """A new, empty index of this format (refresh() then reads every pod: a rebuild)."""
        db.executescript(f"BEGIN IMMEDIATE; {_SCHEMA} PRAGMA user_version = {FORMAT_VERSION}; "
                         "COMMIT;")
        self.rebuilds.append(reason)
        log.warning("results index %s: %s; rebuilding it from the runs",
                    self.path or "(memory)", reason)

    # --- keeping it in step ---------------------------------------------------------------

    def add(self, run: Run) -> None:
        """A run just stored (under the store's write lock)."""
        with self.lock:
            self.db.execute("BEGIN IMMEDIATE")
            try:
                self._insert([run])
                self._record_pod(run.namespace, run.pod)
                self.db.execute("COMMIT")
            except BaseException:
                self.db.execute("ROLLBACK")
                raise

    def discard(self, run_ids: Iterable[str]) -> None:
        """Runs removed (quota, retention); their pods' directories recorded as they are now."""
        ids = list(run_ids)
        if not ids:
            return
        with self.lock:
            self.db.execute("BEGIN IMMEDIATE")
            try:
                self.db.executemany("DELETE FROM runs WHERE id = ?", [(i,) for i in ids])
                for namespace, pod in {tuple(i.split("/")[:2]) for i in ids}:
                    self._record_pod(namespace, pod)
                self.db.execute("COMMIT")
            except BaseException:
                self.db.execute("ROLLBACK")
                raise

    def _insert(self, runs: Iterable[Run]) -> None:
        rows = []
        for run in runs:
            meta = {key: run.meta[key] for key in LIST_KEYS if key in run.meta}
            if not run.meta.get("outcome"):  # a recorded run: its counts, from the stacks
                meta["hottest"] = [list(pair) for pair in run.hottest[:3]]  # when meta.json
            rows.append((run.id, run.namespace, run.pod, run.name, _epoch(run.started),
                         run.technique, run.samples, self.run_bytes(run),
                         json.dumps(meta, separators=(",", ":"))))
        self.db.executemany("INSERT OR REPLACE INTO runs VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                            rows)

    def _record_pod(self, namespace: str, pod: str) -> None:
        mtime = self._mtime(self.root / namespace / pod)
        if mtime is None:
            self.db.execute("DELETE FROM pods WHERE namespace = ? AND pod = ?", (namespace, pod))
        else:
            self.db.execute("INSERT OR REPLACE INTO pods VALUES (?, ?, ?)",
                            (namespace, pod, mtime))

    @staticmethod
    def _mtime(path: Path) -> int | None:
        try:
            info = path.lstat()
        except OSError:
            return None
        return info.st_mtime_ns if stat.S_ISDIR(info.st_mode) else None

    def refresh(self, *, force: bool = True) -> int:
        """Read again the pods whose directory changed since the index recorded it (runs
        added or removed by hand, a lost index); stats every pod directory, reads only the
        changed ones. Returns how many pods were read. Without `force`, at most every
        REFRESH_SECONDS."""
        with self.lock:
            now = self.clock()
            if not force and now - self._refreshed < REFRESH_SECONDS:
                return 0
            self._refreshed = now
            known = {(ns, pod): mtime for ns, pod, mtime in
                     self.db.execute("SELECT namespace, pod, mtime FROM pods")}
            on_disk: dict[tuple[str, str], int] = {}
            for namespace in _subdirectories(self.root):
                if not self.is_namespace(namespace):
                    continue
                for pod in _subdirectories(self.root / namespace):
                    if not self.is_pod(pod):
                        continue
                    mtime = self._mtime(self.root / namespace / pod)
                    if mtime is not None:
                        on_disk[(namespace, pod)] = mtime
            changed = [key for key, mtime in on_disk.items() if known.get(key) != mtime]
            gone = [key for key in known if key not in on_disk]
            if not changed and not gone:
                return 0
            began = time.monotonic()
            self.db.execute("BEGIN IMMEDIATE")
            try:
                for namespace, pod in gone:
                    self.db.execute("DELETE FROM runs WHERE namespace = ? AND pod = ?",
                                    (namespace, pod))
                    self.db.execute("DELETE FROM pods WHERE namespace = ? AND pod = ?",
                                    (namespace, pod))
                for namespace, pod in changed:
                    self.db.execute("DELETE FROM runs WHERE namespace = ? AND pod = ?",
                                    (namespace, pod))
                    self._insert(self.scan_pod(namespace, pod))
                    self.db.execute("INSERT OR REPLACE INTO pods VALUES (?, ?, ?)",
                                    (namespace, pod, on_disk[(namespace, pod)]))
                self.db.execute("COMMIT")
            except BaseException:
                self.db.execute("ROLLBACK")
                raise
            log.info("results index: read %d changed pod directories, %d gone, in %.2f s",
                     len(changed), len(gone), time.monotonic() - began)
            return len(changed)

    # --- reading --------------------------------------------------------------------------

    def namespaces(self) -> list[str]:
        self.refresh(force=False)
        with self.lock:
            # From the pods' table (a row per pod directory): not a scan of every run.
            return [row[0] for row in
                    self.db.execute("SELECT DISTINCT namespace FROM pods ORDER BY namespace")]

    def page(self, query: Query, make: Callable[..., Run]) -> Page:
        """One page of runs, newest first; `make` builds a Run from an index row."""
        if not 1 <= query.limit <= MAX_PAGE:
            raise QueryError(f"limit: {query.limit} is not within 1..{MAX_PAGE}")
        where, args = self._filters(query)
        after = decode_cursor(query.cursor) if query.cursor else None
        self.refresh(force=False)
        with self.lock:
            total = self.db.execute(f"SELECT COUNT(*) FROM runs WHERE {where}",  # noqa: S608
                                    args).fetchone()[0]
            if after is not None:
                where += " AND (started, id) < (?, ?)"
                args = [*args, after[0], after[1]]
            rows = self.db.execute(
                "SELECT id, started, technique, samples, meta FROM runs "  # noqa: S608
                f"WHERE {where} ORDER BY started DESC, id DESC LIMIT ?",
                [*args, query.limit + 1]).fetchall()
            more = len(rows) > query.limit
            rows = rows[:query.limit]
            remaining = self.db.execute(
                f"SELECT COUNT(*) FROM runs WHERE {where} AND "  # noqa: S608
                "(started, id) < (?, ?)",
                [*args, rows[-1][1], rows[-1][0]]).fetchone()[0] if more else 0
        runs = [make(run_id, started, technique, samples, json.loads(meta))
                for run_id, started, technique, samples, meta in rows]
        token = encode_cursor(rows[-1][1], rows[-1][0]) if more and rows else None
        return Page(runs, token, total, remaining)

    @staticmethod
    def _filters(query: Query) -> tuple[str, list[Any]]:
        clauses, args = ["1"], []  # type: list[str], list[Any]
        if query.namespaces is not None:
            names = list(query.namespaces)
            if not names:
                return "0", []
            clauses.append(f"namespace IN ({','.join('?' * len(names))})")
            args += names
        if query.pod is not None:
            clauses.append("pod = ?")
            args.append(query.pod)
        if query.technique is not None:
            clauses.append("technique = ?")
            args.append(query.technique)
        if query.since is not None:
            clauses.append("started >= ?")
            args.append(_epoch(query.since))
        if query.until is not None:
            clauses.append("started < ?")
            args.append(_epoch(query.until))
        return " AND ".join(clauses), args

    def namespace_runs(self, namespace: str) -> list[tuple[str, int, int]]:
        """(id, started, bytes) of a namespace's runs, oldest first (the quota's order)."""
        with self.lock:
            return self.db.execute(
                "SELECT id, started, bytes FROM runs WHERE namespace = ? "
                "ORDER BY started, id", (namespace,)).fetchall()

    def expired(self, keep: int | None, oldest: datetime | None) -> list[tuple[str, int]]:
        """(id, started) of the runs beyond the newest `keep` of their pod or started before
        `oldest`."""
        if keep is None and oldest is None:
            return []
        with self.lock:
            return self.db.execute(
                "SELECT id, started FROM (SELECT id, started, ROW_NUMBER() OVER (PARTITION BY "
                "namespace, pod ORDER BY started DESC, id DESC) AS position FROM runs) "
                "WHERE position > ? OR started < ?",
                (keep if keep is not None else 1 << 62,
                 _epoch(oldest) if oldest is not None else -(1 << 62))).fetchall()

    def usage(self) -> dict[str, tuple[int, int]]:
        """Per namespace: (runs, bytes)."""
        with self.lock:
            return {namespace: (runs, size) for namespace, runs, size in self.db.execute(
                "SELECT namespace, COUNT(*), SUM(bytes) FROM runs GROUP BY namespace")}

    def close(self) -> None:
        with self.lock:
            self.db.close()


def _subdirectories(path: Path) -> Iterator[str]:
    """Names of the directories in `path` (not links, not hidden), without reading them."""
    try:
        with os.scandir(path) as entries:
            names = [entry.name for entry in entries
                     if not entry.name.startswith(".") and entry.is_dir(follow_symlinks=False)]
    except (FileNotFoundError, NotADirectoryError):
        return
    yield from sorted(names)
