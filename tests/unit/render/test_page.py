"""The page the renderer writes: the profile is JSON that cannot end its element, the markup is
the same whatever the profile holds, the policy allows exactly the inline script and style, the
named share comes from the recording or the frame names, and metadata is shown as text."""

from __future__ import annotations

import base64
import hashlib
import json
import re
from html.parser import HTMLParser
from typing import Any

import pytest

from tests.unit.render.pagedata import drawn
from webhook.render import Profile, named_share, render
from webhook.render.page import page_data, script_json
from webhook.stacks import Stack, folded

HOSTILE = ["x</script><img src=x onerror=alert(1)>.js", '"><svg onload=alert(2)>',
           "javascript:alert(3)", "{{7*7}}", "<!--", "]]>", "\u202eevil\u202c", "a\u200bb",
           "\x1b[31mred\x07", '{"names":["pwn"]}', "& &amp; &lt;"]


class Elements(HTMLParser):
    """Every start tag with its attributes, and the text of each <script>."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, list[tuple[str, str | None]]]] = []
        self.scripts: list[str] = []
        self.styles: list[str] = []
        self._in = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, attrs))
        self._in = tag

    def handle_endtag(self, tag: str) -> None:
        self._in = ""

    def handle_data(self, data: str) -> None:
        if self._in == "script":
            self.scripts.append(data)
        elif self._in == "style":
            self.styles.append(data)


def parsed(html: str) -> Elements:
    elements = Elements()
    elements.feed(html)
    return elements


def hostile_profile() -> Profile:
    stacks: dict[Stack, float] = {("main", name): 10 + i for i, name in enumerate(HOSTILE)}
    meta = {"technique": "perf</script>", "notes": ["<b>note</b>", 7, {"x": 1}],
            "warnings": "<img src=x onerror=alert(4)>", "duration": float("nan"),
            "unwinding": {"/app/<x>": "dwarf", "bad": ["list"]}, "pod": "p", "namespace": "n"}
    return Profile(stacks, meta=meta, title="<title>t</title>")


def test_script_json_cannot_end_its_element() -> None:
    data = {"s": HOSTILE + ["</SCRIPT >", "\u2028\u2029"]}
    text = script_json(data)
    assert not re.search(r"[<>&\u2028\u2029]", text)
    assert json.loads(text) == data


def test_the_markup_does_not_depend_on_the_profile() -> None:
    plain = parsed(render(Profile({("main", "fib"): 3})).html)
    hostile = parsed(render(hostile_profile()).html)
    assert [tag for tag, _ in hostile.tags] == [tag for tag, _ in plain.tags]
    # Attributes differ only in the policy's hashes (the same script and style) and in nothing
    # else: no attribute carries app text.
    assert hostile.tags == plain.tags
    assert len(hostile.scripts) == 2 and hostile.scripts[1] == plain.scripts[1]
    data = json.loads(hostile.scripts[0])
    assert data["names"] == ["main", *HOSTILE] and data["title"] == "<title>t</title>"


def test_the_policy_allows_exactly_the_inline_script_and_style() -> None:
    page = render(hostile_profile())
    elements = parsed(page.html)

    def digest(text: str) -> str:
        return base64.b64encode(hashlib.sha256(text.encode()).digest()).decode()

    meta = dict(next(attrs for tag, attrs in elements.tags if tag == "meta" and
                     ("http-equiv", "Content-Security-Policy") in attrs))
    assert meta["content"] == page.csp
    policy = dict(part.split(" ", 1) for part in page.csp.split("; "))
    assert policy["default-src"] == "'none'"
    assert policy["script-src"] == f"'sha256-{digest(elements.scripts[1])}'"
    assert policy["style-src"] == f"'sha256-{digest(elements.styles[0])}'"
    assert "unsafe" not in page.csp and "http" not in page.csp


def test_home_link_is_only_a_path_up_the_tree() -> None:
    assert '<a href="../../">all runs</a>' in render(Profile({("a",): 1}), home="../../").html
    for bad in ("javascript:alert(1)", "//evil.example/", "../x", '"><b>'):
        with pytest.raises(ValueError, match="not a relative path"):
            render(Profile({("a",): 1}), home=bad)


def test_named_share_counts_sampled_frames() -> None:
    stacks = folded.parse("main;[unknown];fib 3\nmain;0x7f3a00001234 1\n"
                          "main;[libc.so.6+0x1d2f] 1\nmain;deadbeefcafe 1\n")
    share = named_share(stacks)
    assert share is not None and share.frames == 3 * 3 + 2 * 3
    assert share.share == pytest.approx((15 - 3 - 3) / 15)
    assert named_share({}) is None
    kernel = named_share({("fib", "[unknown]_[k]"): 1})
    assert kernel is not None and kernel.share == 0.5
    toolset: dict[Stack, float] = {
        ("node::Start", "[libuv.so.1.0.0]", "[unwind stopped: libfoo.so]", "fib"): 2}
    marked = named_share(toolset)
    assert marked is not None and marked.share == 0.5


def test_named_share_from_the_recording_wins() -> None:
    stacks: dict[Stack, float] = {("main", "[unknown]"): 4}
    recorded = Profile(stacks, meta={"named_share": 0.97}).named()
    assert recorded is not None and recorded.source == "meta.json"
    for bad in (1.5, -1, "0.9", True, None, float("nan")):
        named = Profile(stacks, meta={"named_share": bad}).named()
        assert named is not None and (named.source, named.share) == ("frames", 0.5)


def test_facts_and_notes_are_text_of_known_keys_only() -> None:
    data: dict[str, Any] = page_data(hostile_profile())
    assert data["facts"] == [("pod", "n/p"), ("technique", "perf</script>"),
                             ("unwinding", "/app/<x>: dwarf")]
    assert data["notes"] == ["<b>note</b>"]
    assert data["warnings"] == ["<img src=x onerror=alert(4)>"]
    assert data["unnamed"] == []


def test_the_recordings_units_and_depths() -> None:
    meta = {"type": "offcpu", "unit": "microseconds", "seconds": 10, "duration": 11.2,
            "mean_depth": 12.5, "max_depth": 40}
    data = page_data(Profile({("a",): 1}, meta=meta))
    assert data["unit"] == "\u00b5s"
    assert ("duration", "10 s") in data["facts"]  # the recording's length, not the command's
    assert ("depth", "12.5 frames on average, 40 at most") in data["facts"]
    assert page_data(Profile({("a",): 1}, unit="nanoseconds"))["unit"] == "ns"
    assert page_data(Profile({("a",): 1}, meta={"unit": "<b>"}))["unit"] == "<b>"


def test_differential_data_carries_both_real_counts_and_the_scale() -> None:
    """A's counts travel as recorded (the page shows them as A's samples), with the factor
    that scales them to B's total for the comparison (shown as "scaled")."""
    before = folded.parse("a;b 10\n")
    after = folded.parse("a;b 5\na;c 15\n")
    data = page_data(Profile(after, base=before))
    assert drawn(data, "before") == {("a", "b"): 10, ("a", "c"): 0}
    assert drawn(data) == {("a", "b"): 5, ("a", "c"): 15}
    assert data["differential"] is True
    assert data["scale"] == 2.0 and data["totals"] == [10, 20]
