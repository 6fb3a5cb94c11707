"""The results page over a store (Flask test client): lists runs by namespace and pod, shows
each run's flame graph data, the differential graph and downloads that are the stored samples;
bad ids get a 404 with the reason, and app-controlled frame names never become markup."""

from __future__ import annotations

import gzip
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from flask.testing import FlaskClient

from tests.unit.render.pagedata import drawn, page_data
from webhook.results.store import Store
from webhook.results.web import create_app
from webhook.stacks import folded

T0 = datetime(2026, 12, 3, 7, 0, 0, tzinfo=UTC)
HOSTILE = "</script><img src=x onerror=alert(1)>"


@pytest.fixture
def client(tmp_path: Path) -> FlaskClient:
    store = Store(tmp_path)
    store.save("shop", "web-1", "perf", folded.parse("main;fib 90\nmain;gc 10\n"), started=T0,
               meta={"duration": 30, "frequency": 99})
    store.save("shop", "web-1", "perf", folded.parse("main;fib 40\nmain;io 60\n"),
               started=T0 + timedelta(hours=1), meta={"duration": 30})
    store.save("batch", "job-x", "perf", {("main", HOSTILE): 5}, started=T0)
    return create_app(tmp_path).test_client()


def test_index_lists_runs_by_namespace_and_pod(client: FlaskClient) -> None:
    html = client.get("/").get_data(as_text=True)
    assert [m for m in re.findall(r'<h2 class="pod">(.*?)</h2>', html)] == [
        "batch / job-x", "shop / web-1"]
    rows = re.findall(r'data-run="([^"]+)"', html)
    assert rows[1:] == ["shop/web-1/20261203T080000Z-perf", "shop/web-1/20261203T070000Z-perf"]
    assert "fib (90 %)" in html
    assert 'href="runs/shop/web-1/20261203T070000Z-perf/profile.pb.gz"' in html


def test_index_fills_every_column_when_meta_json_is_short(tmp_path: Path) -> None:
    """A run whose meta.json has no count, no hottest functions and the toolset's `seconds`
    (not the store's `duration`), and one with no meta.json at all (both copied in by hand):
    the columns come from the stacks and the recording, never 0 samples or an empty cell."""
    import json

    short_dir = tmp_path / "shop" / "web-1" / "20261203T070000Z-perf"
    short_dir.mkdir(parents=True)
    (short_dir / "stacks.folded").write_text("main;fib 30\nmain;gc 10\n")
    (short_dir / "meta.json").write_text(json.dumps({"seconds": 12.5}))
    bare_dir = tmp_path / "shop" / "web-2" / "20261203T070000Z-perf"
    bare_dir.mkdir(parents=True)
    (bare_dir / "stacks.folded").write_text("main;io 7\n")
    store = Store(tmp_path)
    short = store.get(f"shop/web-1/{short_dir.name}")
    bare = store.get(f"shop/web-2/{bare_dir.name}")
    html = create_app(tmp_path).test_client().get("/").get_data(as_text=True)
    cells = re.findall(r'<tr class="run" data-run="([^"]+)">.*?<td>perf</td>'
                       r'<td class="num">([^<]*)</td>\s*<td class="num">([^<]*)</td>\s*'
                       r'<td>([^<]*)</td>', html, re.S)
    assert cells == [(short.id, "12.5", "40", "fib (75 %)"), (bare.id, "", "7", "io (100 %)")]


def test_empty_store_says_how_runs_arrive(tmp_path: Path) -> None:
    html = create_app(tmp_path).test_client().get("/").get_data(as_text=True)
    assert 'id="empty"' in html and "sidecar-debug.io/schedule" in html


def test_run_page_is_the_renderers_page_with_its_policy(client: FlaskClient) -> None:
    response = client.get("/runs/shop/web-1/20261203T070000Z-perf/")
    html = response.get_data(as_text=True)
    data = page_data(html)
    assert drawn(data) == {("main", "fib"): 90, ("main", "gc"): 10}
    assert data["title"] == "shop/web-1/20261203T070000Z-perf"
    assert ["duration", "30 s"] in data["facts"] and ["frequency", "99 Hz"] in data["facts"]
    # The page carries its script inline, allowed by hash, by the header as by its <meta>.
    policy = response.headers["Content-Security-Policy"]
    assert "script-src 'sha256-" in policy and "'self'" not in policy
    own, ancestors = policy.rsplit("; ", 1)
    assert ancestors == "frame-ancestors 'none'" and f'content="{own}"' in html
    assert '<a href="../../../../">all runs</a>' in html
    assert client.get("/static/flamegraph.js").status_code == 404
    assert "script-src 'none'" in client.get("/").headers["Content-Security-Policy"]


def test_frame_names_stay_data(client: FlaskClient) -> None:
    html = client.get("/runs/batch/job-x/20261203T070000Z-perf/").get_data(as_text=True)
    assert "<img" not in html and html.count("</script>") == 2  # the data and the script
    assert page_data(html)["names"] == ["main", HOSTILE]
    index = client.get("/").get_data(as_text=True)
    assert "<img" not in index


def test_downloads_are_the_stored_samples(client: FlaskClient) -> None:
    base = "/runs/shop/web-1/20261203T070000Z-perf/"
    text = client.get(base + "stacks.folded").get_data(as_text=True)
    assert folded.parse(text) == {("main", "fib"): 90, ("main", "gc"): 10}
    speedscope = client.get(base + "profile.speedscope.json").get_json()
    assert sum(speedscope["profiles"][0]["weights"]) == 100
    response = client.get(base + "profile.pb.gz")
    assert gzip.decompress(response.data)
    assert "attachment" in response.headers["Content-Disposition"]


def test_differential_page_and_download(client: FlaskClient) -> None:
    a = "shop/web-1/20261203T070000Z-perf"
    b = "shop/web-1/20261203T080000Z-perf"
    data = page_data(client.get(f"/diff?a={a}&b={b}").get_data(as_text=True))
    assert data["differential"] is True
    assert drawn(data, "before") == {("main", "fib"): 90, ("main", "gc"): 10,
                                         ("main", "io"): 0}
    assert drawn(data) == {("main", "fib"): 40, ("main", "gc"): 0, ("main", "io"): 60}
    pairs = folded.parse_diff(client.get(f"/diff.folded?a={a}&b={b}").get_data(as_text=True))
    assert pairs[("main", "gc")] == (10, 0)


@pytest.mark.parametrize("path,code,reason", [
    ("/runs/shop/web-1/20261203T090000Z-perf/", 404, "no run shop/web-1/20261203T090000Z-perf"),
    ("/runs/shop/web-1/..%2F..%2Fetc/", 404, "was not found"),
    ("/runs/shop/web-1/..perf/stacks.folded", 404, "is not a run name"),
    ("/runs/Shop/web-1/20261203T070000Z-perf/stacks.folded", 404, "namespace name"),
    ("/diff?a=shop/web-1/20261203T070000Z-perf", 400, "pick two runs"),
])
def test_bad_requests_say_why(client: FlaskClient, path: str, code: int, reason: str) -> None:
    response = client.get(path)
    assert response.status_code == code
    assert reason in response.get_data(as_text=True)
