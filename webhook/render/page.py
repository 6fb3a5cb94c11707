"""The flame graph page: one self-contained HTML document (style, script and profile inline),
usable as a file:// page and as the results page's answer.

Nothing in the markup comes from the profile. The profile travels as JSON in a data block
(`<script type="application/json">`, never executed) escaped so that it cannot end its
element; flamegraph.js draws it with textContent and SVG text nodes. The page's
Content-Security-Policy allows exactly its own style and script by their SHA-256 hashes and
nothing else (no inline handlers, no other scripts, no network), in a <meta> element so that it
holds for a saved file too; a server sends the same policy as a header (Page.csp).
"""

from __future__ import annotations

import base64
import hashlib
import html
import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from webhook.render.model import Profile, frame_table, is_named
from webhook.wire import jsonio

_HOME = re.compile(r"^(?:\.\./)*$|^\./$|^/$")


@dataclass(frozen=True)
class Page:
    html: str
    csp: str  # the policy the page carries; a server sends it as its header too


@cache
def _asset(name: str) -> str:
    return resources.files("webhook.render").joinpath(name).read_text(encoding="utf-8")


def _sha256(text: str) -> str:
    digest = hashlib.sha256(text.encode("utf-8")).digest()
    return "'sha256-" + base64.b64encode(digest).decode() + "'"


def script_json(data: Any) -> str:
    """JSON that can sit inside a <script> element: no `<`, `>` or `&` (no `</script>`, no
    `<!--`), and no U+2028/U+2029 (line ends to old JavaScript parsers)."""
    text = jsonio.dumps(data).decode("utf-8")
    for char, escape in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"),
                         ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
        text = text.replace(char, escape)
    return text


def page_data(profile: Profile) -> dict[str, Any]:
    """What flamegraph.js reads: frame names once, the stacks as their indices (FrameTable)."""
    before: list[float] = []
    counts: list[float]
    diff: dict[str, Any] = {}
    if profile.base is not None:
        # A's real counts travel as they are; the page scales them by `scale` (B's total over
        # A's, difffolded.pl -n) to compare shares, and says which numbers are scaled.
        base = {stack: count for stack, count in profile.base.items() if count > 0}
        after = {stack: count for stack, count in profile.stacks.items() if count > 0}
        stacks = list(base.keys() | after.keys())
        stacks.sort()
        table = frame_table(stacks)
        before = [base.get(stack, 0) for stack in stacks]
        counts = [after.get(stack, 0) for stack in stacks]
        totals = (sum(before), sum(counts))
        diff = {"scale": totals[1] / totals[0] if totals[0] and totals[1] else 1.0,
                "totals": list(totals)}
        named = profile.named()
    else:
        kept = {stack: count for stack, count in profile.stacks.items() if count > 0}
        table = frame_table(kept)
        counts = list(kept.values())
        named = profile.named(table, counts)
    return {
        "title": profile.title or "flame graph",
        "name": profile.name,
        "differential": profile.differential,
        "unit": profile.count_unit(),
        "facts": profile.facts(),
        "notes": profile.notes("notes"),
        "warnings": profile.notes("warnings"),
        "named": {"share": named.share, "source": named.source} if named else None,
        "names": table.names,
        "unnamed": [number for number, name in enumerate(table.names) if not is_named(name)],
        "frames": table.frames,
        "depths": table.depths,
        "counts": counts,
        **({"before": before, **diff} if profile.differential else {}),
    }


_TEMPLATE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{csp}">
<meta name="referrer" content="no-referrer">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>flame graph</title>
<style>{style}</style>
</head><body>
<header>{nav}<h1 id="title"></h1><p id="facts"></p><ul id="notes"></ul></header>
<div class="bar">
<label>Search <input id="search" type="search" placeholder="function name or regex"
 autocomplete="off" spellcheck="false"></label> <span id="matched"></span>
<button id="reset" type="button" title="Esc">Reset</button> <span id="focus"></span>
<label>Order <select id="order"><option value="name">by name</option>
<option value="weight">by weight</option></select></label>
<label><input id="icicle" type="checkbox"> inverted (icicle)</label>
<span id="downloads">Download <button type="button" data-format="folded">folded</button>
<button type="button" class="single" data-format="speedscope">speedscope</button>
<button type="button" class="single" data-format="pprof">pprof</button></span>
</div>
<p id="legend" hidden><span class="grew">grew in B</span><span class="shrank">shrank in B</span>
widths are B's; A's counts are scaled to B's total to compare shares (marked "scaled");
hover a frame for both sides' real counts.</p>
<div id="details"></div>
<div id="graph"><svg id="flame" xmlns="http://www.w3.org/2000/svg" role="img"></svg></div>
<div id="tip" role="tooltip" hidden></div>
<script id="profile" type="application/json">{data}</script>
<script>{script}</script>
</body></html>
"""


def render(profile: Profile, *, home: str | None = None) -> Page:
    """The page of `profile`; `home` (a relative path like `../../`, for the results page) adds
    a link back to the list of runs."""
    style, script = _asset("flamegraph.css"), _asset("flamegraph.js")
    csp = (f"default-src 'none'; script-src {_sha256(script)}; style-src {_sha256(style)}; "
           "base-uri 'none'; form-action 'none'")
    nav = ""
    if home is not None:
        if not _HOME.match(home):
            raise ValueError(f"home {home!r} is not a relative path up the tree")
        nav = f'<nav><a href="{html.escape(home or "./")}">all runs</a></nav>'
    text = _TEMPLATE.format(csp=csp, style=style, nav=nav, script=script,
                            data=script_json(page_data(profile)))
    return Page(text, csp)
