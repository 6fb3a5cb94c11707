"""The one renderer's page in headless chromium (DevTools protocol).

Hostile frame names (markup, script ends, handlers, `javascript:`, template syntax, bidi and
control characters, a megabyte-long name, names that look like the page's JSON) reach pages made
by the three paths a person opens -- `sidecar-debug render`, the CLI's flamegraph rendering
(webhook.sessions.session.write_flamegraph) and the results page -- and nothing of them becomes
an element, an attribute or a script: the DOM holds only the renderer's own element types and
attributes, no handler runs, the Content-Security-Policy reports no violation, and the names
are there as text. Then the page's features, driven as a person would: search, tooltip, zoom,
Esc, sort, icicle, downloads (read back), a deep stack, a differential graph.
Skipped when chromium is not installed."""

from __future__ import annotations

import gzip
import json
import re
import shutil
import subprocess
import threading
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path

import pytest
from werkzeug.serving import make_server

from tests.browser.cdp import Browser, chromium_path
from tests.browser.flame import act, click, frames, tooltips, visible
from webhook.commands.cli import main
from webhook.results.store import Store
from webhook.results.web import create_app
from webhook.sessions.session import write_flamegraph
from webhook.stacks import Stack, detect, folded

pytestmark = pytest.mark.skipif(chromium_path() is None,
                                reason="chromium is not installed (scripts/setup.sh)")

MEGABYTE_NAME = "M" * 1_000_000
HOSTILE = [
    "x</script><img src=x onerror=__xss.push(1)>.js",
    '"><svg onload=__xss.push(2)>',
    "javascript:__xss.push(3)",
    "{{7*7}} ${7*7} <%= 7*7 %>",
    '"]}</script><script>__xss.push(4)</script>',
    '{"names":["pwn"],"stacks":[[0]],"counts":[1],"title":"<b>"}',
    "<!--<script>__xss.push(5)//-->",
    "&ltimg src=x onerror=__xss.push(6)&gt &#60b&#62",  # entities without the `;` of folded
    "</style><style>body{display:none}</style>",
    "\u202eexe.txt\u202c and \u2066isolated\u2069",
    "zero\u200bwidth\ufeffjoiner\u200d",
    "bell\x07 escape\x1b[31mred nul\x00 del\x7f",
    MEGABYTE_NAME,
]
NOTE = "perf map from <img src=x onerror=__xss.push(7)>"
# What the renderer itself creates; anything else came from the data.
TAGS = {"HTML", "HEAD", "META", "TITLE", "STYLE", "BODY", "HEADER", "NAV", "A", "H1", "P", "UL",
        "LI", "B", "SPAN", "DIV", "LABEL", "INPUT", "BUTTON", "SELECT", "OPTION", "SCRIPT", "svg",
        "g", "rect", "text"}
ATTRIBUTES = {"charset", "http-equiv", "content", "name", "lang", "id", "class", "type",
              "placeholder", "autocomplete", "spellcheck", "title", "value", "data-format",
              "hidden", "xmlns", "role", "x", "y", "width", "height", "fill", "href", "disabled"}
INIT = """window.__xss = []; window.__csp = [];
document.addEventListener("securitypolicyviolation",
  function (e) { window.__csp.push(e.violatedDirective + " " + e.blockedURI); });"""
SCRIPT = (Path(__file__).resolve().parents[2] / "webhook" / "render" / "flamegraph.js").read_text()


def hostile_stacks() -> dict[Stack, int]:
    stacks: dict[Stack, int] = {("main", "handler", name): 10 + i for i, name in enumerate(HOSTILE)}
    stacks[("main", "handler", HOSTILE[3])] = 30  # wide enough for its label to show it
    stacks[("main", "fib")] = 40
    return stacks


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    with Browser() as chromium:
        chromium.add_init_script(INIT)
        chromium.allow_downloads(tmp_path_factory.mktemp("downloads"))
        yield chromium


def open_page(browser: Browser, url: str) -> None:
    browser.open(url)
    assert browser.evaluate("document.querySelectorAll('#flame rect').length") > 0


def assert_inert(browser: Browser, names: Sequence[str], notes: Sequence[str] = ()) -> None:
    """Nothing of the data became markup or code, and the names are there as text."""
    dom = browser.evaluate("""[...document.querySelectorAll('*')].map(e =>
        [e.tagName, [...e.attributes].map(a => [a.name, a.value])])""")
    assert {tag for tag, _ in dom} <= TAGS, {tag for tag, _ in dom} - TAGS
    attributes = {name for _, attrs in dom for name, _ in attrs}
    assert attributes <= ATTRIBUTES, attributes - ATTRIBUTES
    values = [value for _, attrs in dom for _, value in attrs]
    assert not [v for v in values if "__xss" in v or "javascript:" in v or "{{" in v]
    hrefs = [value for _, attrs in dom for name, value in attrs if name == "href"]
    assert set(hrefs) <= {"../../../../", "./"}, hrefs
    scripts = browser.evaluate("[...document.scripts].map(s => [s.type, s.src, s.text.length])")
    assert scripts == [["application/json", "", scripts[0][2]], ["", "", len(SCRIPT)]]
    assert browser.evaluate("document.scripts[1].text") == SCRIPT
    # No handler ran, the policy saw no attempt, the script ran without an error.
    browser.evaluate("new Promise(r => setTimeout(r, 200))")  # let a loaded <img> fail
    assert browser.evaluate("window.__xss") == []
    assert browser.evaluate("window.__csp") == []
    assert browser.console_errors() == []
    # The names are text: each frame's tooltip names it exactly (escapes made visible).
    shown = {tip.split("\n")[0] for tip in tooltips(browser)}
    assert {visible(name) for name in names} <= shown, {visible(n) for n in names} - shown
    labels = browser.evaluate("[...document.querySelectorAll('#flame text')]"
                              ".map(t => t.textContent).join('\\n')")
    assert "49" not in labels  # no template ran over the names
    if HOSTILE[3] in names:
        assert "{{7*7}}" in labels
    noted = browser.evaluate("[...document.querySelectorAll('#notes li')].map(l => l.textContent)")
    assert [note for note in notes if not any(note in line for line in noted)] == []


def test_render_command_page_is_inert(tmp_path: Path, browser: Browser) -> None:
    source = tmp_path / "hostile.folded"
    source.write_text(folded.format_stacks(hostile_stacks()))
    assert main(["render", str(source), "-o", str(tmp_path / "page.html"),
                 "--title", HOSTILE[0]]) == 0
    open_page(browser, (tmp_path / "page.html").as_uri())
    assert browser.evaluate("document.getElementById('title').textContent") == HOSTILE[0]
    assert_inert(browser, HOSTILE)


def test_cli_flamegraph_page_is_inert(tmp_path: Path, browser: Browser) -> None:
    stacks = tmp_path / "web-1.folded"
    stacks.write_text(folded.format_stacks(hostile_stacks()))
    meta = {"technique": "perf", "notes": [NOTE], "warnings": HOSTILE[:3],
            "unwinding": {HOSTILE[1]: "dwarf"}, "named_share": 0.5}
    write_flamegraph(stacks, json.dumps(meta).encode(), tmp_path / "web-1.html",
                     title="shop/web-1")
    open_page(browser, (tmp_path / "web-1.html").as_uri())
    assert_inert(browser, HOSTILE, [NOTE, *HOSTILE[:3]])
    assert browser.evaluate("document.getElementById('named').textContent") == (
        "named frames: 50.0 % (from the recording)")


@pytest.fixture(scope="module")
def results_site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("results")
    store = Store(root)
    started = datetime(2026, 12, 3, 7, 0, 0, tzinfo=UTC)
    store.save("shop", "web-1", "perf", hostile_stacks(), started=started,
               meta={"notes": [NOTE], "duration": 10})
    store.save("shop", "web-1", "perf", {("main", "fib"): 10, ("main", HOSTILE[1]): 30},
               started=started.replace(hour=8))
    server = make_server("127.0.0.1", 0, create_app(root), threaded=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()


def test_results_page_is_inert(results_site: str, browser: Browser) -> None:
    open_page(browser, results_site + "/runs/shop/web-1/20261203T070000Z-perf/")
    assert_inert(browser, HOSTILE, [NOTE])
    open_page(browser, results_site + "/diff?a=shop/web-1/20261203T070000Z-perf"
              "&b=shop/web-1/20261203T080000Z-perf")
    assert_inert(browser, [HOSTILE[1]])


# --- features ---------------------------------------------------------------------------------

PROFILE = ("node;main;handle;fibonacci 70\nnode;main;handle;render 20\nnode;main;zeta 3\n"
           "node;main;alpha 1\nnode;gc 6\n")


@pytest.fixture
def page(tmp_path: Path, browser: Browser) -> Browser:
    source = tmp_path / "web.folded"
    source.write_text(PROFILE)
    assert main(["render", str(source)]) == 0
    open_page(browser, (tmp_path / "web.html").as_uri())
    return browser


def test_search_highlights_and_tooltip_says_shares(page: Browser) -> None:
    drawn = frames(page)
    assert drawn["fibonacci"]["width"] == pytest.approx(0.7 * drawn["all"]["width"], rel=0.01)
    act(page, "const s = document.getElementById('search'); s.value = 'fibo';"
              "s.dispatchEvent(new Event('input'))")
    drawn = frames(page)
    assert [name for name, frame in drawn.items() if frame["match"]] == ["fibonacci"]
    assert drawn["fibonacci"]["computed"] == "rgb(224, 64, 251)"
    assert page.evaluate("document.getElementById('matched').textContent") == (
        "matched: 70.00 % of samples")
    tips = [tip for tip in tooltips(page) if tip.startswith("fibonacci\n")]
    assert tips == ["fibonacci\n70 samples, 70.00 % of all, 77.78 % of the parent"]
    assert page.evaluate("document.getElementById('samples').textContent") == (
        "samples: 100")


def test_zoom_reset_and_escape(page: Browser) -> None:
    full = frames(page)["all"]["width"]
    click(page, "render")
    zoomed = frames(page)
    assert zoomed["render"]["width"] == pytest.approx(full, rel=0.01)
    assert "fibonacci" not in zoomed and zoomed["handle"]["width"] == pytest.approx(full)
    assert page.evaluate("document.getElementById('focus').textContent") == "zoomed into render"
    act(page, "const s = document.getElementById('search'); s.value = 'gc';"
              "s.dispatchEvent(new Event('input'))")
    act(page, "document.dispatchEvent(new KeyboardEvent('keydown', {key: 'Escape'}))")
    back = frames(page)
    assert back["render"]["width"] == pytest.approx(0.2 * full, rel=0.01)
    assert page.evaluate("document.getElementById('focus').textContent") == ""
    assert page.evaluate("document.getElementById('search').value") == ""
    assert not any(frame["match"] for frame in back.values())
    click(page, "handle")
    assert page.evaluate("document.getElementById('reset').disabled") is False
    act(page, "document.getElementById('reset').click()")
    assert frames(page)["handle"]["width"] == pytest.approx(0.9 * full, rel=0.01)
    assert page.evaluate("document.getElementById('reset').disabled") is True


def test_sort_by_name_or_weight_and_icicle(page: Browser) -> None:
    drawn = frames(page)
    assert drawn["alpha"]["x"] < drawn["handle"]["x"] < drawn["zeta"]["x"]  # flamegraph.pl
    assert drawn["all"]["y"] > drawn["node"]["y"] > drawn["main"]["y"]  # root at the bottom
    act(page, "const o = document.getElementById('order'); o.value = 'weight';"
              "o.dispatchEvent(new Event('change'))")
    drawn = frames(page)
    assert drawn["handle"]["x"] < drawn["zeta"]["x"] < drawn["alpha"]["x"]
    assert drawn["fibonacci"]["x"] < drawn["render"]["x"]
    act(page, "document.getElementById('icicle').click()")
    drawn = frames(page)
    assert drawn["all"]["y"] == 0 and drawn["node"]["y"] < drawn["main"]["y"]


def test_downloads_are_the_profile(page: Browser) -> None:
    expected = folded.parse(PROFILE)
    got = {}
    for button in ("folded", "speedscope", "pprof"):
        act(page, f"document.querySelector('[data-format={button}]').click()")
        name, path = page.wait_download()
        got[name] = path.read_bytes()
    assert sorted(got) == ["web.folded", "web.pb.gz", "web.speedscope.json"]
    assert folded.parse(got["web.folded"].decode()) == expected
    speedscope = detect.load(got["web.speedscope.json"])
    assert speedscope.format == "speedscope" and speedscope.stacks == expected
    pprof = detect.load(got["web.pb.gz"])
    assert pprof.format == "pprof" and pprof.stacks == expected
    assert gzip.decompress(got["web.pb.gz"])
    if shutil.which("go"):  # an independent reader
        path = page.downloads / "web.pb.gz"
        path.write_bytes(got["web.pb.gz"])
        top = subprocess.run(["go", "tool", "pprof", "-top", str(path)], capture_output=True,
                             text=True, check=True, timeout=120).stdout
        assert re.search(r"\b70\s+70\.00%.*fibonacci", top), top


def test_a_deep_stack_with_few_samples_is_readable(tmp_path: Path, browser: Browser) -> None:
    deep = ";".join(["[unknown]"] * 120 + [f"fn{i}" for i in range(10)])
    source = tmp_path / "deep.folded"
    source.write_text(f"{deep} 80\nnode;main 4\n")
    assert main(["render", str(source)]) == 0
    open_page(browser, (tmp_path / "deep.html").as_uri())
    size = browser.evaluate("""(() => { const g = document.getElementById('graph'),
        s = document.getElementById('flame'); return {height: +s.getAttribute('height'),
        top: g.scrollTop, view: g.clientHeight, scroll: g.scrollHeight,
        rects: s.querySelectorAll('rect').length,
        labels: s.querySelectorAll('text').length}; })()""")
    assert size["height"] >= 131 * 17 and size["rects"] == 133 and size["labels"] >= 131
    # Scrolled to the root, where the stacks start; the graph scrolls, the page stays.
    assert size["top"] > 0 and size["top"] + size["view"] >= size["scroll"] - 1
    deepest = frames(browser)["fn9"]
    assert deepest["y"] == 0 and deepest["width"] > 1000 * 80 / 84
    act(browser, "document.getElementById('icicle').click()")
    assert browser.evaluate("document.getElementById('graph').scrollTop") == 0


def test_differential_graph_colours_and_downloads(tmp_path: Path, browser: Browser) -> None:
    (tmp_path / "a.folded").write_text("node;main;fibonacci 70\nnode;main;render 20\nnode;gc 10\n")
    (tmp_path / "b.folded").write_text("node;main;fibonacci 20\nnode;main;render 30\n"
                                       "node;main;json 50\n")
    assert main(["render", str(tmp_path / "b.folded"), "--diff", str(tmp_path / "a.folded"),
                 "-o", str(tmp_path / "diff.html")]) == 0
    open_page(browser, (tmp_path / "diff.html").as_uri())
    drawn = frames(browser)
    assert drawn["json"]["fill"].startswith("rgb(255,")  # new in B: red
    assert drawn["fibonacci"]["fill"].endswith(",255)")  # shrank: blue
    assert "gc" not in drawn  # not in B: no width
    tips = [tip for tip in tooltips(browser) if tip.startswith("fibonacci\n")]
    assert tips == ["fibonacci\nA 70 samples, B 20 samples (-50 samples), 20.00 % of all B"]
    assert browser.evaluate("document.getElementById('samples').textContent") == (
        "samples: A 100 samples, B 100 samples")
    assert browser.evaluate("document.getElementById('legend').hidden") is False
    assert browser.evaluate("[...document.querySelectorAll('#downloads button')]"
                            ".filter(b => !b.hidden).map(b => b.textContent)") == ["folded"]
    act(browser, "document.querySelector('[data-format=folded]').click()")
    name, path = browser.wait_download()
    assert name == "b.diff.folded"
    assert folded.parse_diff(path.read_text())[("node", "gc")] == (10, 0)
    assert browser.console_errors() == []


def test_a_differential_graph_says_which_numbers_are_scaled(tmp_path: Path,
                                                             browser: Browser) -> None:
    """A has 1,377 samples, B 1,882: the header gives each side's real total, the tooltip A's
    real count and its value scaled to B's total (which the colours compare)."""
    (tmp_path / "a.folded").write_text("main;fib 1000\nmain;gc 377\n")
    (tmp_path / "b.folded").write_text("main;fib 1000\nmain;gc 882\n")
    assert main(["render", str(tmp_path / "b.folded"), "--diff", str(tmp_path / "a.folded"),
                 "-o", str(tmp_path / "diff.html")]) == 0
    open_page(browser, (tmp_path / "diff.html").as_uri())
    assert browser.evaluate("document.getElementById('samples').textContent") == (
        "samples: A 1377 samples, B 1882 samples (A scaled \u00d71.37 to compare)")
    tips = [tip for tip in tooltips(browser) if tip.startswith("fib\n")]
    assert tips == ["fib\nA 1000 samples (1366.7 samples scaled), B 1000 samples "
                    "(-366.7 samples against scaled A), 53.13 % of all B"]
    assert frames(browser)["fib"]["fill"].endswith(",255)")  # a smaller share of B: blue
    assert browser.console_errors() == []


def test_weighted_profiles_read_in_seconds_and_bytes(tmp_path: Path, browser: Browser) -> None:
    """Go's CPU profile (nanoseconds) as `go tool pprof` shows it, not 620000000 ns; an empty
    frame name is shown as such."""
    fixtures = Path(__file__).resolve().parents[1] / "fixtures" / "profiles"
    assert main(["render", str(fixtures / "go-cpu.pb.gz"), "-o", str(tmp_path / "cpu.html")]) == 0
    open_page(browser, (tmp_path / "cpu.html").as_uri())
    assert browser.evaluate("document.getElementById('samples').textContent") == (
        "total: 620 ms")
    tips = [tip for tip in tooltips(browser) if tip.startswith("main.main\n")]
    assert tips and re.fullmatch(r"main\.main\n[0-9.]+ ms, [0-9.]+ % of all, [0-9.]+ % of the "
                                 r"parent", tips[0]), tips
    (tmp_path / "empty.folded").write_text("main;;leaf 3\n 1\n")
    assert main(["render", str(tmp_path / "empty.folded"), "-o", str(tmp_path / "e.html")]) == 0
    open_page(browser, (tmp_path / "e.html").as_uri())
    assert "(empty frame name)\n3 samples, 75.00 % of all, 100.00 % of the parent" in tooltips(
        browser)
    assert browser.console_errors() == []
