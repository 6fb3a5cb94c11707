"""The results store: runs land complete under NAMESPACE/POD/TIME-TECHNIQUE, are listed newest
first, refuse names that are not Kubernetes names, and retention keeps what it promises."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from webhook.results.store import FOLDED_NAME, META_NAME, Store, StoreError
from webhook.stacks import folded

T0 = datetime(2026, 12, 3, 7, 0, 0, tzinfo=UTC)
STACKS = folded.parse("main;fib 9\nmain;gc 1\n")


def test_save_writes_folded_and_meta(tmp_path: Path) -> None:
    store = Store(tmp_path)
    run = store.save("shop", "web-1", "perf", STACKS, started=T0,
                     meta={"duration": 30, "schedule": "namespace/shop#0"})
    assert run.id == "shop/web-1/20261203T070000Z-perf"
    assert run.path == tmp_path / "shop" / "web-1" / "20261203T070000Z-perf"
    assert folded.parse((run.path / FOLDED_NAME).read_text()) == STACKS
    meta = json.loads((run.path / META_NAME).read_text())
    assert meta["samples"] == 10 and meta["hottest"][0] == ["fib", 9]
    assert meta["started"] == "2026-12-03T07:00:00Z" and meta["schedule"] == "namespace/shop#0"
    assert not [p for p in (tmp_path / "shop" / "web-1").iterdir() if p.name.startswith(".")]


def test_same_second_gets_a_second_directory(tmp_path: Path) -> None:
    store = Store(tmp_path)
    first = store.save("shop", "web-1", "perf", STACKS, started=T0)
    second = store.save("shop", "web-1", "perf", STACKS, started=T0)
    assert first.name != second.name and second.path.is_dir()
    assert len(store.runs()) == 2
    assert store.get(second.id).path == second.path


@pytest.mark.parametrize("namespace,pod,technique", [
    ("../etc", "web", "perf"), ("shop", "web/../../x", "perf"), ("Shop", "web", "perf"),
    ("shop", "web", "perf/x"), ("shop", "", "perf"),
])
def test_names_that_are_not_kubernetes_names_are_refused(
        tmp_path: Path, namespace: str, pod: str, technique: str) -> None:
    with pytest.raises(StoreError, match="is not a"):
        Store(tmp_path).save(namespace, pod, technique, STACKS, started=T0)
    assert list(tmp_path.iterdir()) == []


def test_runs_newest_first_and_filtered(tmp_path: Path) -> None:
    store = Store(tmp_path)
    for minutes, pod in ((0, "web-1"), (10, "web-2"), (5, "web-1")):
        store.save("shop", pod, "perf", STACKS, started=T0 + timedelta(minutes=minutes))
    store.save("other", "db-0", "bpftrace-profile", STACKS, started=T0)
    assert [r.pod for r in store.runs("shop")] == ["web-2", "web-1", "web-1"]
    assert [r.started.minute for r in store.runs("shop", "web-1")] == [5, 0]
    assert store.runs("other")[0].technique == "bpftrace-profile"


def test_unfinished_and_foreign_entries_are_not_runs(tmp_path: Path) -> None:
    store = Store(tmp_path)
    store.save("shop", "web-1", "perf", STACKS, started=T0)
    (tmp_path / "shop" / "web-1" / ".incoming-abc").mkdir()
    (tmp_path / "shop" / "web-1" / "20261203T080000Z-perf").mkdir()  # no stacks yet
    (tmp_path / "shop" / "web-1" / "notes").mkdir()
    (tmp_path / "shop" / "web-1" / "20261203T090000Z-perf").symlink_to(tmp_path)
    assert [r.name for r in store.runs()] == ["20261203T070000Z-perf"]


def test_get_refuses_bad_ids(tmp_path: Path) -> None:
    store = Store(tmp_path)
    for bad in ("shop/web-1", "../x/y", "shop/web-1/..", "shop/web-1/20261203T070000Z-perf"):
        with pytest.raises(StoreError):
            store.get(bad)


def test_prune_by_count_per_pod_and_by_age(tmp_path: Path) -> None:
    store = Store(tmp_path)
    for hours in range(5):
        store.save("shop", "web-1", "perf", STACKS, started=T0 + timedelta(hours=hours))
    store.save("shop", "web-2", "perf", STACKS, started=T0 + timedelta(hours=4))
    store.save("old", "db-0", "perf", STACKS, started=T0 - timedelta(days=30))
    now = T0 + timedelta(hours=5)
    removed = store.prune(keep=3, max_age=timedelta(days=7), now=now)
    assert len(removed) == 3
    assert [r.started.hour for r in store.runs("shop", "web-1")] == [11, 10, 9]
    assert len(store.runs("shop", "web-2")) == 1
    assert not (tmp_path / "old").exists()  # emptied namespace directories go too
    removed = store.prune(keep=None, max_age=timedelta(hours=1, minutes=30), now=now)
    assert sorted(r.started.hour for r in removed) == [9, 10]  # older than 10:30
    assert [r.started.hour for r in store.runs()] == [11, 11]


def test_a_corrupt_folded_file_is_named(tmp_path: Path) -> None:
    run = Store(tmp_path).save("shop", "web-1", "perf", STACKS, started=T0)
    (run.path / FOLDED_NAME).write_text("garbage\n")
    with pytest.raises(StoreError, match="shop/web-1/20261203T070000Z-perf.*line 1"):
        Store(tmp_path).get(run.id).stacks()
