"""Reading and driving the renderer's flame graph page in chromium: what each drawn frame is
(by its tooltip's first line), hovering and clicking frames."""

from __future__ import annotations

import json
import re
from typing import Any

from tests.browser.cdp import Browser


def visible(name: str, limit: int = 1000) -> str:
    """The name as the page shows it (flamegraph.js: visible(), clip())."""
    shown = re.sub(r"[\x00-\x1f\x7f-\x9f\xad\u061c\u200b-\u200f\u2028-\u202e\u2060-\u206f\ufeff]",
                   lambda m: f"\\u{ord(m.group()):04x}", name)
    return shown if len(shown) <= limit else f"{shown[:limit]}... ({len(shown)} characters)"


def tooltips(browser: Browser) -> list[str]:
    """The tooltip of every drawn frame, hovering each."""
    result: list[str] = browser.evaluate("""[...document.querySelectorAll('#flame rect')].map(r => {
        r.dispatchEvent(new MouseEvent('mousemove', {bubbles: true, clientX: 5, clientY: 5}));
        return document.getElementById('tip').textContent; })""")
    return result


def frames(browser: Browser) -> dict[str, dict[str, Any]]:
    """Each drawn frame by name: x, y, width, class, fill."""
    result: dict[str, dict[str, Any]] = browser.evaluate("""Object.fromEntries(
        [...document.querySelectorAll('#flame rect')].map(r => {
          r.dispatchEvent(new MouseEvent('mousemove', {bubbles: true}));
          return [document.getElementById('tip').textContent.split('\\n')[0],
                  {x: +r.getAttribute('x'), y: +r.getAttribute('y'),
                   width: +r.getAttribute('width'), match: r.classList.contains('match'),
                   fill: r.getAttribute('fill'), computed: getComputedStyle(r).fill}]; }))""")
    return result


def act(browser: Browser, script: str) -> None:
    browser.evaluate(script)


def click(browser: Browser, name: str) -> None:
    act(browser, f"""[...document.querySelectorAll('#flame rect')].find(r => {{
        r.dispatchEvent(new MouseEvent('mousemove', {{bubbles: true}}));
        return document.getElementById('tip').textContent.split('\\n')[0] === {json.dumps(name)};
      }}).dispatchEvent(new MouseEvent('click', {{bubbles: true}}))""")
