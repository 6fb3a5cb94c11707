"""The store's index (webhook.results.index): pages of runs newest first that chain without
gaps or repeats, filters, page tokens that are checked, an index rebuilt when it is lost,
corrupt, of another format or a link, runs changed by hand picked up by their pod directory,
and listing, retention and a restart that read the index rather than the runs."""

from __future__ import annotations

import json
import os
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.unit.results.service_harness import make_service
from webhook.commands.cli import main as cli
from webhook.results import metrics
from webhook.results.index import (
    FORMAT_VERSION,
    INDEX_DIR,
    INDEX_FILE,
    Query,
    QueryError,
    decode_cursor,
    encode_cursor,
)
from webhook.results.store import Store
from webhook.results.web import create_app

T0 = datetime(2026, 12, 1, 0, 0, 0, tzinfo=UTC)


def fill(root: Path, spaces: int = 3, pods: int = 4, runs: int = 10) -> list[str]:
    """spaces x pods x runs runs, perf and py-spy alternating, a minute apart per pod (some
    start in the same second: the page order breaks ties by id). Returns their ids."""
    store = Store(root)
    ids = []
    for s in range(spaces):
        for p in range(pods):
            for r in range(runs):
                technique = "perf" if r % 2 == 0 else "py-spy"
                run = store.save(f"ns-{s}", f"pod-{p}", technique, {("main", f"f{r}"): r + 1},
                                 started=T0 + timedelta(minutes=r))
                ids.append(run.id)
    return ids


def all_pages(store: Store, **filters: Any) -> list[list[str]]:
    pages, cursor = [], None
    while True:
        page = store.page(Query(cursor=cursor, **filters))
        pages.append([run.id for run in page.runs])
        if page.next is None:
            return pages
        cursor = page.next


def newest_first(store: Store) -> list[str]:
    """What the whole tree says (every meta.json read), newest first."""
    return [run.id for run in sorted(store.runs(), key=lambda r: (r.started, r.id),
                                     reverse=True)]


def test_pages_chain_newest_first_without_gaps_or_repeats(tmp_path: Path) -> None:
    ids = fill(tmp_path)
    store = Store(tmp_path)
    pages = all_pages(store, limit=7)
    assert [len(p) for p in pages] == [7] * 17 + [1]
    assert [i for p in pages for i in p] == newest_first(store)
    assert sorted(i for p in pages for i in p) == sorted(ids)
    first = store.page(Query(limit=7))
    assert (first.total, first.remaining, first.first) == (120, 113, 1)
    second = store.page(Query(limit=7, cursor=first.next))
    assert (second.total, second.remaining, second.first) == (120, 106, 8)


def test_a_run_stored_between_two_pages_neither_shifts_nor_repeats_the_next(
        tmp_path: Path) -> None:
    fill(tmp_path, spaces=1, pods=1, runs=6)
    store = Store(tmp_path)
    first = store.page(Query(limit=3))
    store.save("ns-0", "pod-0", "perf", {("main",): 1}, started=T0 + timedelta(hours=5))
    second = store.page(Query(limit=3, cursor=first.next))
    assert [r.started.minute for r in first.runs] == [5, 4, 3]
    assert [r.started.minute for r in second.runs] == [2, 1, 0]


def test_filters(tmp_path: Path) -> None:
    fill(tmp_path)
    store = Store(tmp_path)
    everything = store.runs()

    def ids(**filters: Any) -> set[str]:
        return {i for p in all_pages(store, **filters) for i in p}

    assert ids(namespaces=["ns-1"]) == {r.id for r in everything if r.namespace == "ns-1"}
    assert ids(namespaces=["ns-0", "ns-2"], pod="pod-3") == {
        r.id for r in everything if r.namespace in ("ns-0", "ns-2") and r.pod == "pod-3"}
    assert ids(technique="py-spy") == {r.id for r in everything if r.technique == "py-spy"}
    since, until = T0 + timedelta(minutes=3), T0 + timedelta(minutes=5)
    assert ids(since=since, until=until) == {
        r.id for r in everything if since <= r.started < until}
    assert len(ids(since=since, until=until)) == 24
    assert ids(namespaces=[]) == set()
    assert ids(namespaces=["nowhere"]) == set()


def test_a_page_carries_what_the_list_shows_without_reading_meta_json(tmp_path: Path) -> None:
    store = Store(tmp_path)
    store.save("shop", "web", "perf", {("main", "fib"): 30, ("main", "gc"): 10}, started=T0,
               meta={"duration": 30, "schedule": "nightly", "cron": "0 2 * * *"})
    [run] = store.page(Query()).runs
    assert (run.samples, run.hottest[0], run.seconds) == (40, ("fib", 30), 30)
    assert run.meta["schedule"] == "nightly" and "cron" not in run.meta  # get() has it all
    assert store.get(run.id).meta["cron"] == "0 2 * * *"


@pytest.mark.parametrize("token", [
    "!!!", "bm90IGEgY3Vyc29y",  # "not a cursor"
    encode_cursor(1, "only/two"), encode_cursor(1, "a/b/c d"), "x" * 601,
    encode_cursor(-1, "ns/pod/run"), encode_cursor(10**13, "ns/pod/run"),
    "MTJ-bnMvcG9kL3J1bgo"])  # "12~ns/pod/run\n"
def test_a_page_token_it_did_not_write_is_refused_with_the_reason(tmp_path: Path,
                                                                  token: str) -> None:
    fill(tmp_path, spaces=1, pods=1, runs=2)
    with pytest.raises(QueryError, match="page token"):
        Store(tmp_path).page(Query(cursor=token))


def test_cursor_round_trip() -> None:
    assert decode_cursor(encode_cursor(1796083200, "ns/pod/20261201T000000Z-perf")) == (
        1796083200, "ns/pod/20261201T000000Z-perf")


def _index(root: Path) -> Path:
    return root / INDEX_DIR / INDEX_FILE


@pytest.mark.parametrize("damage", ["deleted", "garbage", "truncated", "other-version",
                                    "dropped-table"])
def test_a_lost_or_corrupt_index_is_rebuilt_from_the_runs(tmp_path: Path, damage: str) -> None:
    fill(tmp_path)
    store = Store(tmp_path)
    before = [i for p in all_pages(store, limit=50) for i in p]
    assert store.index.rebuilds == []  # fill()'s store built it, from the runs
    store.index.close()
    path = _index(tmp_path)
    if damage == "deleted":
        path.unlink()
    elif damage == "garbage":
        path.write_bytes(os.urandom(8192))
    elif damage == "truncated":
        path.write_bytes(path.read_bytes()[:3000])
    else:
        db = sqlite3.connect(path)
        if damage == "other-version":
            db.execute(f"PRAGMA user_version = {FORMAT_VERSION + 1}")
        else:
            db.execute("DROP TABLE runs")
        db.commit()
        db.close()
    again = Store(tmp_path)
    assert [i for p in all_pages(again, limit=50) for i in p] == before
    assert len(again.index.rebuilds) == 1 and again.index.path == path


def test_an_intact_index_is_not_rebuilt_and_a_restart_reads_no_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fill(tmp_path)
    before = [i for p in all_pages(Store(tmp_path), limit=50) for i in p]

    def no_reading(*args: Any) -> None:
        raise AssertionError("a run was read")

    monkeypatch.setattr(Store, "_load", no_reading)
    again = Store(tmp_path)
    assert [i for p in all_pages(again, limit=50) for i in p] == before
    assert again.index.rebuilds == []
    assert len(again.prune(keep=5, max_age=None, now=T0, dry_run=True)) == 60


def test_a_link_where_the_index_is_is_removed_not_followed(tmp_path: Path) -> None:
    root, outside = tmp_path / "store", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    fill(root, spaces=1, pods=1, runs=3)
    Store(root).index.close()
    target = outside / "victim"
    target.write_bytes(b"keep me")
    _index(root).unlink()
    _index(root).symlink_to(target)
    store = Store(root)
    assert len(store.page(Query()).runs) == 3
    assert target.read_bytes() == b"keep me" and not _index(root).is_symlink()
    assert store.index.rebuilds == ["not a regular file (a link?)"]
    # The index's directory as a link to elsewhere: removed, a directory of ours made.
    store.index.close()
    (root / INDEX_DIR / INDEX_FILE).unlink()
    (root / INDEX_DIR).rmdir()
    (root / INDEX_DIR).symlink_to(outside)
    store = Store(root)
    assert len(store.page(Query()).runs) == 3
    assert not (root / INDEX_DIR).is_symlink() and sorted(os.listdir(outside)) == ["victim"]


def test_an_index_damaged_while_open_is_rebuilt_at_the_next_page(tmp_path: Path) -> None:
    fill(tmp_path, spaces=1, pods=2, runs=3)
    store = Store(tmp_path)
    assert store.page(Query()).total == 6
    store.index.db.execute("DROP TABLE runs")
    assert store.page(Query()).total == 6 and len(store.index.rebuilds) == 1


def test_a_directory_it_may_not_write_gets_an_index_in_memory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from webhook.results.index import RunIndex

    fill(tmp_path, spaces=1, pods=2, runs=3)
    (tmp_path / INDEX_DIR / INDEX_FILE).unlink()

    def read_only(directory: Path) -> None:
        raise PermissionError(30, "Read-only file system")

    monkeypatch.setattr(RunIndex, "_own_directory", staticmethod(read_only))
    store = Store(tmp_path)
    assert store.page(Query()).total == 6 and store.index.path is None
    assert "kept in memory" in store.index.rebuilds[0]
    assert not (tmp_path / INDEX_DIR / INDEX_FILE).exists()


def test_runs_added_or_removed_by_hand_are_picked_up_by_their_pod_directory(
        tmp_path: Path) -> None:
    import shutil

    fill(tmp_path, spaces=2, pods=2, runs=3)
    store = Store(tmp_path)
    assert store.page(Query()).total == 12
    copied = tmp_path / "ns-9" / "pod-0" / "20261202T000000Z-perf"
    copied.mkdir(parents=True)
    (copied / "stacks.folded").write_text("main;hand 3\n")
    shutil.rmtree(tmp_path / "ns-0" / "pod-1")
    shutil.rmtree(next((tmp_path / "ns-1" / "pod-1").iterdir()))
    assert store.index.refresh() == 2  # the changed pods read, the gone one dropped
    page = store.page(Query())
    assert page.total == 12 - 3 - 1 + 1 and page.runs[0].id == "ns-9/pod-0/" + copied.name
    assert page.runs[0].samples == 3
    assert [i for p in all_pages(store) for i in p] == newest_first(store)


def test_retention_and_quota_keep_the_index_in_step(tmp_path: Path) -> None:
    fill(tmp_path, spaces=2, pods=2, runs=5)
    store = Store(tmp_path)
    removed = store.prune(keep=2, max_age=timedelta(minutes=4), now=T0 + timedelta(minutes=5))
    assert len(removed) == 12
    assert store.page(Query()).total == 8 and [i for p in all_pages(store) for i in p] == \
        newest_first(store)
    store.remove(store.page(Query(namespaces=["ns-1"], pod="pod-1")).runs[0])
    store.remove(store.page(Query(namespaces=["ns-1"], pod="pod-1")).runs[0])
    assert not (tmp_path / "ns-1" / "pod-1").exists()  # its last run: the pod's directory too
    assert [i for p in all_pages(store) for i in p] == newest_first(store)
    assert store.index.refresh() == 0  # nothing the index does not know


def test_metrics_report_runs_and_bytes_per_namespace(tmp_path: Path) -> None:
    fill(tmp_path, spaces=2, pods=2, runs=3)
    subject = make_service(tmp_path, {})
    subject.apply_retention()
    for space in ("ns-0", "ns-1"):
        used = sum(f.stat().st_size for f in (tmp_path / space).rglob("*") if f.is_file())
        assert metrics.REGISTRY.get_sample_value(
            "sidecar_debug_results_namespace_runs", {"namespace": space}) == 6
        assert metrics.REGISTRY.get_sample_value(
            "sidecar_debug_results_namespace_bytes", {"namespace": space}) == used
    assert metrics.REGISTRY.get_sample_value("sidecar_debug_results_store_runs") == 12
    import shutil

    shutil.rmtree(tmp_path / "ns-1")
    subject.apply_retention()
    assert metrics.REGISTRY.get_sample_value(
        "sidecar_debug_results_namespace_runs", {"namespace": "ns-1"}) is None
    assert metrics.REGISTRY.get_sample_value("sidecar_debug_results_store_runs") == 6


# --- the page and /api/runs ----------------------------------------------------------------


def test_api_runs_pages_through_the_link_header(tmp_path: Path) -> None:
    fill(tmp_path, spaces=2, pods=2, runs=5)
    client = create_app(tmp_path).test_client()
    seen, url = [], "/api/runs?limit=6&technique=perf"
    while url:
        answer = client.get(url)
        assert answer.status_code == 200 and answer.headers["X-Total-Count"] == "12"
        seen += [item["id"] for item in answer.get_json()]
        link = answer.headers.get("Link")
        url = link[1:link.index(">")] if link else ""
        assert not link or "technique=perf" in link and 'rel="next"' in link
    store = Store(tmp_path)
    assert seen == [i for i in newest_first(store) if i.endswith("-perf")]


@pytest.mark.parametrize(("query", "reason"), [
    ("page=garbage", "page token"),
    ("limit=0", "limit"), ("limit=5000", "limit"), ("limit=ten", "limit"),
    ("namespace=Not_A_Name", "namespace name"), ("pod=..", "pod name"),
    ("technique=PERF", "technique name"),
    ("since=yesterday", "since"), ("until=2026-13-01", "until"),
    ("since=2026-12-02&until=2026-12-01", "time range is empty"),
    ("namespce=ns-0", "unknown parameter 'namespce'"),
    ("limit=5&limit=6", "more than once"),
])
def test_bad_list_input_is_a_400_with_the_reason(tmp_path: Path, query: str,
                                                 reason: str) -> None:
    fill(tmp_path, spaces=1, pods=1, runs=2)
    client = create_app(tmp_path).test_client()
    answer = client.get(f"/api/runs?{query}")
    assert answer.status_code == 400 and reason in answer.get_json()["error"]
    page = client.get(f"/?{query}")
    assert page.status_code == 400 and reason.replace("'", "&#39;") in page.get_data(
        as_text=True)


def test_the_page_shows_one_page_with_filters_and_a_link_to_older_runs(tmp_path: Path) -> None:
    fill(tmp_path, spaces=2, pods=2, runs=60)  # 240 runs: 100 on the first page
    client = create_app(tmp_path).test_client()
    html = client.get("/").get_data(as_text=True)
    assert html.count('<tr class="run"') == 100
    assert '<span id="count">240 runs</span>, newest first:\n1&ndash;100 here' in html
    older = html.split('id="older" href="', 1)[1].split('"', 1)[0].replace("&amp;", "&")
    html = client.get("/" + older).get_data(as_text=True)
    assert "101&ndash;200 here" in html
    filtered = client.get("/?namespace=ns-1&pod=pod-0&technique=perf").get_data(as_text=True)
    assert filtered.count('<tr class="run"') == 30 and 'id="older"' not in filtered
    assert 'value="ns-1"' in filtered  # the form keeps the filters
    none = client.get("/?since=2030-01-01").get_data(as_text=True)
    assert "No run matches these filters" in none


class OnlyShop:
    """A reader who may read namespace `shop` only."""

    def reader(self, header: str | None) -> str:
        return "alice"

    def can_read(self, user: Any, namespace: str) -> bool:
        return namespace == "shop"


def test_readers_page_only_through_namespaces_they_may_read(tmp_path: Path) -> None:
    store = Store(tmp_path)
    for i in range(5):
        store.save("shop", "web", "perf", {("a",): 1}, started=T0 + timedelta(minutes=i))
        store.save("secret", "db", "perf", {("a",): 1}, started=T0 + timedelta(minutes=i))
    client = create_app(tmp_path, access=OnlyShop()).test_client()
    answer = client.get("/api/runs?limit=2")
    assert answer.headers["X-Total-Count"] == "5"
    assert {item["namespace"] for item in answer.get_json()} == {"shop"}
    refused = client.get("/api/runs?namespace=secret")
    assert refused.status_code == 403 and "namespace secret" in refused.get_json()["error"]


def test_results_list_pages_like_kubectl(tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    fill(tmp_path, spaces=1, pods=2, runs=3)
    assert cli(["results", "list", "--dir", str(tmp_path), "--limit", "4", "-o", "json"]) == 0
    first = json.loads(capsys.readouterr().out)
    assert len(first["items"]) == 4 and first["metadata"]["remainingItemCount"] == 2
    assert cli(["results", "list", "--dir", str(tmp_path), "--limit", "4",
                "--continue", first["metadata"]["continue"]]) == 0
    out, err = capsys.readouterr()
    assert len(out.splitlines()) == 2 and "next page" not in err
    assert cli(["results", "list", "--dir", str(tmp_path), "--limit", "4"]) == 0
    assert "runs 1-4 of 6; the next page: --continue " in capsys.readouterr().err
    assert cli(["results", "list", "--dir", str(tmp_path), "--continue", "nope"]) == 2
    assert "page token" in capsys.readouterr().err
    assert cli(["results", "list", "--dir", str(tmp_path), "--pod", "pod-1", "--technique",
                "py-spy", "--since", "2026-12-01T00:01:00Z"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "ns-0/pod-1/20261201T000100Z-py-spy\t2 samples"]
