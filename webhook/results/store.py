"""The results store: profiling runs kept on a directory (a PersistentVolumeClaim in the chart).

Layout, one directory per run:

    ROOT/NAMESPACE/POD/20261203T070000Z-perf/
        stacks.folded   the samples (the source of truth; every other format is computed)
        meta.json       namespace, pod, technique, start time, duration, schedule, summary...

A failed scheduled recording is a run too (`save_failure`): a directory with only meta.json,
`outcome` "failed" with the `reason` (a short code) and `message` (one line); it has no stacks,
is listed beside the pod's runs and goes with retention like them.

A run is written into a hidden directory beside its final place and renamed into it when
complete, so that a reader (the results page, mounted read-only) never sees half a run.
Names come from the Kubernetes API, but are still checked against what Kubernetes allows
before they become paths. Retention: at most `keep` runs per pod (newest kept) and none older
than `max_age`.

Listing, the quota, retention and a restart read the index kept beside the runs
(webhook.results.index, ROOT/.index/), not the runs: `page()` is a page of runs newest first,
filtered; `runs()` still reads the whole tree (the index's rebuild, small local directories).
"""

from __future__ import annotations

import json
import logging
import os
import re
import secrets
import shutil
import sqlite3
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import cached_property
from pathlib import Path
from typing import Any

from webhook.results.index import Page, Query, RunIndex
from webhook.stacks import Stack, folded

log = logging.getLogger(__name__)

FOLDED_NAME = "stacks.folded"
META_NAME = "meta.json"
STAMP_FORMAT = "%Y%m%dT%H%M%SZ"
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(
    r"^(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_TECHNIQUE = re.compile(r"^[a-z0-9][a-z0-9-]{0,39}$")
_RUN_NAME = re.compile(r"^(\d{8}T\d{6}Z)(?:-(\d+))?-([a-z0-9][a-z0-9-]{0,39})$")
MAX_FOLDED_BYTES = 64 << 20
MAX_META_BYTES = 1 << 20
FAILED = "failed"


class StoreError(ValueError):
    """A name, run or file the store refuses; the message says which and why."""


@dataclass(frozen=True)
class Run:
    """One stored run; `id` is NAMESPACE/POD/RUN, its path under the store."""

    namespace: str
    pod: str
    name: str  # the run directory: TIMESTAMP[-N]-TECHNIQUE
    started: datetime
    technique: str
    path: Path
    meta: Mapping[str, Any] = field(default_factory=dict)

    @property
    def id(self) -> str:
        return f"{self.namespace}/{self.pod}/{self.name}"

    @property
    def failed(self) -> bool:
        """A failed recording (meta.json only: reason and message, no stacks)."""
        return self.meta.get("outcome") == FAILED

    @property
    def reason(self) -> str:
        value = self.meta.get("reason")
        return value if isinstance(value, str) else ""

    @property
    def message(self) -> str:
        value = self.meta.get("message")
        return value if isinstance(value, str) else ""

    @property
    def samples(self) -> int:
        """meta.json's count, else counted from the stacks (a run copied by hand, a meta.json
        lost or unreadable): the list and the page never show 0 for a run that has samples."""
        value = self.meta.get("samples")
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
        return self._counted[0]

    @property
    def hottest(self) -> list[tuple[str, int]]:
        """The hottest leaf functions (name, self samples), from meta.json or the stacks."""
        value = self.meta.get("hottest")
        if isinstance(value, list):
            pairs = [(item[0], item[1]) for item in value if isinstance(item, list)
                     and len(item) == 2 and isinstance(item[0], str)
                     and isinstance(item[1], int) and not isinstance(item[1], bool)]
            if pairs:
                return pairs
        return self._counted[1]

    @property
    def seconds(self) -> float | None:
        """How long the recording ran: meta.json's `duration` (the store's, from the ticket)
        or `seconds` (the toolset's recording)."""
        for key in ("duration", "seconds"):
            value = self.meta.get(key)
            if isinstance(value, int | float) and not isinstance(value, bool) and (
                    0 <= value < 1e9):
                return value
        return None

    @cached_property
    def _counted(self) -> tuple[int, list[tuple[str, int]]]:
        try:
            stacks = self.stacks()
        except (StoreError, OSError):
            return 0, []
        return folded.total(stacks), folded.hottest(stacks, 10)

    def stacks(self) -> dict[Stack, int]:
        if self.failed:
            raise StoreError(f"run {self.id} failed ({self.reason}): it recorded no stacks")
        path = self.path / FOLDED_NAME
        if path.stat().st_size > MAX_FOLDED_BYTES:
            raise StoreError(f"run {self.id}: {FOLDED_NAME} is larger than {MAX_FOLDED_BYTES} "
                             "bytes")
        try:
            return folded.parse(path.read_text(encoding="utf-8", errors="replace"))
        except folded.FoldedError as error:
            raise StoreError(f"run {self.id}: {FOLDED_NAME}: {error}") from error

    def folded_text(self) -> str:
        if self.failed:
            raise StoreError(f"run {self.id} failed ({self.reason}): it recorded no stacks")
        return (self.path / FOLDED_NAME).read_text(encoding="utf-8", errors="replace")


def check_namespace(name: str) -> str:
    if not isinstance(name, str) or not _DNS_LABEL.match(name):
        raise StoreError(f"{name!r} is not a Kubernetes namespace name (a DNS label)")
    return name


def check_pod(name: str) -> str:
    if not isinstance(name, str) or not _DNS_SUBDOMAIN.match(name):
        raise StoreError(f"{name!r} is not a Kubernetes pod name (a DNS subdomain)")
    return name


def check_technique(name: str) -> str:
    if not isinstance(name, str) or not _TECHNIQUE.match(name):
        raise StoreError(f"{name!r} is not a technique name (lower-case letters, digits, '-')")
    return name


def valid_namespace(name: str) -> bool:
    return bool(_DNS_LABEL.match(name))


def valid_pod(name: str) -> bool:
    return bool(_DNS_SUBDOMAIN.match(name))


def utc(moment: datetime) -> datetime:
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


class Store:
    """The results directory. Reading needs no write access (the page mounts it read-only)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self._index: RunIndex | None = None
        self._index_lock = threading.Lock()

    @property
    def index(self) -> RunIndex:
        """The index beside the runs, opened (and rebuilt when lost) on first use."""
        with self._index_lock:
            if self._index is None:
                self._index = RunIndex(self.root, self._scan_pod, self.run_bytes,
                                       is_namespace=valid_namespace, is_pod=valid_pod)
            return self._index

    def _indexed(self, run: Run) -> Run:
        """A run just stored or found, into the index; an index that cannot be written is
        logged, the run kept (the pod's changed directory brings it in at the next refresh)."""
        try:
            self.index.add(run)
        except (OSError, sqlite3.Error) as error:
            log.error("results index: cannot add %s: %s", run.id, error)
        return run

    # --- writing ----------------------------------------------------------------------------------

    def save(self, namespace: str, pod: str, technique: str,
             stacks: Mapping[Stack, int], *, started: datetime,
             meta: Mapping[str, Any] | None = None) -> Run:
        """Store one run; the folded stacks are written as given, the metadata completed with
        the names, start time, sample count and hottest functions."""
        return self.save_text(namespace, pod, technique, folded.format_stacks(stacks),
                              samples=folded.total(stacks), hottest=folded.hottest(stacks, 10),
                              started=started, meta=meta)

    def save_text(self, namespace: str, pod: str, technique: str, text: str, *, samples: int,
                  hottest: list[tuple[str, int]], started: datetime,
                  meta: Mapping[str, Any] | None = None) -> Run:
        """save() of stacks already written as folded text (format_stacks's, with their
        total and hottest functions: the results service reads pushes in another process)."""
        return self._place(namespace, pod, technique, utc(started), meta, text, {
            "samples": samples,
            "hottest": [[name, count] for name, count in hottest],
        })

    def save_failure(self, namespace: str, pod: str, technique: str, *, started: datetime,
                     reason: str, message: str, meta: Mapping[str, Any] | None = None) -> Run:
        """Store a failed recording: its metadata, `outcome` failed, the reason and message."""
        return self._place(namespace, pod, technique, utc(started), meta, None, {
            "samples": 0, "outcome": FAILED, "reason": reason, "message": message,
        })

    def _place(self, namespace: str, pod: str, technique: str, started: datetime,
               meta: Mapping[str, Any] | None, stacks_text: str | None,
               fields: Mapping[str, Any]) -> Run:
        """Check the names, then write the run (meta.json: `meta`, the run's names and start,
        then `fields`) into a hidden directory and rename it into place, complete."""
        check_namespace(namespace)
        check_pod(pod)
        check_technique(technique)
        pod_dir = self.root / namespace / pod
        pod_dir.mkdir(parents=True, exist_ok=True)
        record: dict[str, Any] = dict(meta or {})
        record.update({"namespace": namespace, "pod": pod, "technique": technique,
                       "started": started.strftime("%Y-%m-%dT%H:%M:%SZ"), **fields})
        staging = pod_dir / f".incoming-{secrets.token_hex(6)}"
        staging.mkdir()
        try:
            if stacks_text is not None:
                (staging / FOLDED_NAME).write_text(stacks_text, encoding="utf-8")
            (staging / META_NAME).write_text(json.dumps(record, indent=2, sort_keys=True) + "\n",
                                             encoding="utf-8")
            stamp = started.strftime(STAMP_FORMAT)
            for attempt in range(1000):
                name = f"{stamp}-{technique}" if attempt == 0 else f"{stamp}-{attempt}-{technique}"
                target = pod_dir / name
                try:
                    os.rename(staging, target)  # fails when a non-empty run is there
                except OSError:
                    if target.exists():
                        continue
                    raise
                return self._indexed(
                    Run(namespace, pod, name, started, technique, target, record))
            raise StoreError(f"too many runs of {namespace}/{pod} at {stamp}")
        finally:
            if staging.exists():
                shutil.rmtree(staging, ignore_errors=True)

    def save_folded(self, namespace: str, pod: str, technique: str, text: str, *,
                    started: datetime, meta: Mapping[str, Any] | None = None) -> Run:
        try:
            stacks = folded.parse(text)
        except folded.FoldedError as error:
            raise StoreError(f"the stacks of {namespace}/{pod} are not folded stacks: "
                             f"{error}") from error
        return self.save(namespace, pod, technique, stacks, started=started, meta=meta)

    def prune(self, *, keep: int | None, max_age: timedelta | None,
              now: datetime, dry_run: bool = False) -> list[Run]:
        """Remove runs beyond the newest `keep` of each pod and runs older than `max_age`;
        empty pod and namespace directories go too. Returns what was removed (with
        `dry_run`: what would be, and nothing is). Reads the index, not the runs."""
        now = utc(now)
        index = self.index
        index.refresh()
        expired = index.expired(keep, now - max_age if max_age is not None else None)
        removed = [self.row_run(run_id, started) for run_id, started in expired]
        if dry_run:
            return removed
        for run in removed:
            shutil.rmtree(run.path, ignore_errors=True)
        self._remove_empty({(run.namespace, run.pod) for run in removed})
        index.discard(run.id for run in removed)
        return removed

    def remove(self, run: Run) -> None:
        """Remove one run (the quota's oldest first); its empty pod directory goes too."""
        shutil.rmtree(run.path, ignore_errors=True)
        self._remove_empty({(run.namespace, run.pod)})
        try:
            self.index.discard([run.id])
        except (OSError, sqlite3.Error) as error:
            log.error("results index: cannot remove %s: %s", run.id, error)

    def _remove_empty(self, pods: set[tuple[str, str]]) -> None:
        for namespace, pod in pods:
            for directory in (self.root / namespace / pod, self.root / namespace):
                try:
                    directory.rmdir()  # only when empty
                except OSError:
                    break

    @staticmethod
    def run_bytes(run: Run) -> int:
        """Bytes the run's files take (0 when it is gone meanwhile)."""
        try:
            return sum(entry.stat().st_size for entry in run.path.iterdir()
                       if entry.is_file() and not entry.is_symlink())
        except OSError:
            return 0

    # --- reading ----------------------------------------------------------------------------------

    @staticmethod
    def _dirs(path: Path) -> Iterator[Path]:
        try:
            entries = sorted(path.iterdir())
        except (FileNotFoundError, NotADirectoryError):
            return
        for entry in entries:
            if not entry.name.startswith(".") and entry.is_dir() and not entry.is_symlink():
                yield entry

    def page(self, query: Query) -> Page:
        """A page of runs, newest first, filtered (webhook.results.index.Query), from the
        index: each Run carries the meta.json fields a listing shows (LIST_KEYS); get() reads
        the whole meta.json. QueryError on a bad filter or page token."""
        try:
            return self.index.page(query, self.row_run)
        except sqlite3.DatabaseError as error:  # damaged while open: checked, rebuilt, again
            log.error("results index: %s; opening it again", error)
            with self._index_lock:
                stale, self._index = self._index, None
            if stale is not None:
                stale.close()
            return self.index.page(query, self.row_run)

    def row_run(self, run_id: str, started: int, technique: str = "", samples: int = 0,
                 meta: dict[str, Any] | None = None) -> Run:
        namespace, pod, name = run_id.split("/")
        if not technique:
            match = _RUN_NAME.match(name)
            technique = match.group(3) if match else ""
        # One Path of the joined text (a page makes hundreds: pathlib's joins cost more than
        # the index's query).
        return Run(namespace, pod, name, datetime.fromtimestamp(started, UTC), technique,
                   Path(f"{self.root}/{run_id}"), {**(meta or {}), "samples": samples})

    def _scan_pod(self, namespace: str, pod: str) -> list[Run]:
        found = []
        for run_dir in self._dirs(self.root / namespace / pod):
            run = self._load(namespace, pod, run_dir)
            if run is not None:
                found.append(run)
        return found

    def runs(self, namespace: str | None = None, pod: str | None = None) -> list[Run]:
        """Every complete run, newest first (optionally of one namespace or pod), read from
        the tree (every meta.json: page() reads the index)."""
        found: list[Run] = []
        for namespace_dir in self._dirs(self.root):
            if namespace is not None and namespace_dir.name != namespace:
                continue
            if not _DNS_LABEL.match(namespace_dir.name):
                continue
            for pod_dir in self._dirs(namespace_dir):
                if pod is not None and pod_dir.name != pod:
                    continue
                if not _DNS_SUBDOMAIN.match(pod_dir.name):
                    continue
                for run_dir in self._dirs(pod_dir):
                    run = self._load(namespace_dir.name, pod_dir.name, run_dir)
                    if run is not None:
                        found.append(run)
        found.sort(key=lambda run: (run.started, run.id), reverse=True)
        return found

    def _load(self, namespace: str, pod: str, run_dir: Path) -> Run | None:
        match = _RUN_NAME.match(run_dir.name)
        if not match:
            return None
        stacks = run_dir / FOLDED_NAME
        recorded = stacks.is_file() and not stacks.is_symlink()
        started = datetime.strptime(match.group(1), STAMP_FORMAT).replace(tzinfo=UTC)
        meta: dict[str, Any] = {}
        meta_path = run_dir / META_NAME
        if meta_path.is_file() and not meta_path.is_symlink():
            try:
                if meta_path.stat().st_size <= MAX_META_BYTES:
                    loaded = json.loads(meta_path.read_text(encoding="utf-8"))
                    meta = loaded if isinstance(loaded, dict) else {}
            except (ValueError, OSError):
                meta = {}
        if recorded:
            meta.pop("outcome", None)  # a run with stacks is a recorded run, whatever it says
        elif meta.get("outcome") != FAILED:
            return None  # neither stacks nor a failure: not a run
        return Run(namespace, pod, run_dir.name, started, match.group(3), run_dir, meta)

    def get(self, run_id: str) -> Run:
        """The run NAMESPACE/POD/RUN; StoreError when the id is malformed or not stored."""
        parts = run_id.split("/") if isinstance(run_id, str) else []
        if len(parts) != 3:
            raise StoreError(f"{run_id!r} is not a run id (NAMESPACE/POD/RUN)")
        namespace, pod, name = parts
        check_namespace(namespace)
        check_pod(pod)
        if not _RUN_NAME.match(name):
            raise StoreError(f"{name!r} is not a run name (TIMESTAMP-TECHNIQUE)")
        path = self.root / namespace / pod / name
        run = self._load(namespace, pod, path) if path.is_dir() and not path.is_symlink() else None
        if run is None:
            raise StoreError(f"no run {run_id} in {self.root}")
        return run
