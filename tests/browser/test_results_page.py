"""The results page in headless chromium (DevTools protocol): it loads, lists the runs, and its
links open the renderer's pages (tests/browser/test_render_page.py drives their features): a
run's flame graph under the page's own Content-Security-Policy header, and the differential
graph from the form. Skipped when chromium is not installed."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from werkzeug.serving import make_server

from tests.browser.cdp import Browser, chromium_path
from tests.browser.flame import click, frames
from webhook.results.store import Store
from webhook.results.web import create_app
from webhook.stacks import folded

pytestmark = pytest.mark.skipif(chromium_path() is None,
                                reason="chromium is not installed (scripts/setup.sh)")
T0 = datetime(2026, 12, 3, 7, 0, 0, tzinfo=UTC)
BEFORE = "node;main;handle;fibonacci 70\nnode;main;handle;render 20\nnode;gc 10\n"
AFTER = "node;main;handle;fibonacci 20\nnode;main;handle;render 30\nnode;main;json 50\n"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("results")
    store = Store(root)
    store.save("shop", "web-1", "perf", folded.parse(BEFORE), started=T0, meta={"duration": 30})
    store.save("shop", "web-1", "perf", folded.parse(AFTER), started=T0 + timedelta(hours=1),
               meta={"duration": 30})
    store.save("batch", "job-x", "bpftrace-profile", folded.parse(BEFORE), started=T0)
    server = make_server("127.0.0.1", 0, create_app(root), threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with Browser() as chromium:
        yield chromium


def test_index_lists_the_runs(site: str, browser: Browser) -> None:
    browser.open(site + "/")
    assert browser.evaluate("document.title") == "runs - sidecar-debug results"
    rows = browser.evaluate("[...document.querySelectorAll('tr.run')].map(r => r.dataset.run)")
    assert rows == ["batch/job-x/20261203T070000Z-bpftrace-profile",
                    "shop/web-1/20261203T080000Z-perf", "shop/web-1/20261203T070000Z-perf"]


def test_a_run_opens_as_the_renderers_flame_graph(site: str, browser: Browser) -> None:
    browser.open(site + "/")
    browser.evaluate("document.querySelectorAll('tr.run a.view')[2].click()")
    browser.wait_event("Page.loadEventFired")
    assert browser.evaluate("location.pathname") == "/runs/shop/web-1/20261203T070000Z-perf/"
    assert browser.evaluate("document.title") == (
        "shop/web-1/20261203T070000Z-perf - flame graph")
    drawn = frames(browser)
    assert drawn["fibonacci"]["width"] == pytest.approx(0.7 * drawn["all"]["width"], rel=0.01)
    click(browser, "render")
    assert browser.evaluate("document.getElementById('focus').textContent") == "zoomed into render"
    assert browser.evaluate("document.getElementById('facts').textContent").startswith(
        "pod: shop/web-1technique: perfstarted: 2026-12-03T07:00:00Zduration: 30 s")
    browser.evaluate("document.querySelector('nav a').click()")
    browser.wait_event("Page.loadEventFired")
    assert browser.evaluate("location.pathname") == "/"
    assert browser.console_errors() == []


def test_differential_graph_renders(site: str, browser: Browser) -> None:
    browser.open(site + "/")
    browser.evaluate("document.querySelector('input[name=a][value$=\"070000Z-perf\"]').click();"
                     "document.querySelector('input[name=b][value$=\"080000Z-perf\"]').click();"
                     "document.getElementById('compare').click()")
    browser.wait_event("Page.loadEventFired")
    assert browser.evaluate("location.pathname") == "/diff"
    drawn = frames(browser)
    assert drawn["json"]["fill"].startswith("rgb(255,")  # new in B: red
    assert drawn["fibonacci"]["fill"].endswith(",255)")  # shrank: blue
    assert browser.console_errors() == []
