"""Take a screenshot of the results page over a results directory (docs/images):

    .venv/bin/python -m tests.browser.screenshot --dir RESULTS --path /runs/NS/POD/RUN/ \
        --search fibonacci --out docs/images/results-page.png
"""

from __future__ import annotations

import argparse
import threading
from pathlib import Path

from werkzeug.serving import make_server

from tests.browser.cdp import Browser
from webhook.results.web import create_app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dir", type=Path, required=True)
    parser.add_argument("--path", default="/")
    parser.add_argument("--search", default="")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--height", type=int, default=760)
    args = parser.parse_args()
    server = make_server("127.0.0.1", 0, create_app(args.dir), threaded=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with Browser(args.width, args.height) as browser:
            browser.open(f"http://127.0.0.1:{server.server_port}{args.path}")
            if args.search:
                browser.evaluate(f"const s = document.getElementById('search'); "
                                 f"s.value = {args.search!r}; s.dispatchEvent(new Event('input'))")
            rects = browser.evaluate("document.querySelectorAll('#flame rect').length")
            args.out.parent.mkdir(parents=True, exist_ok=True)
            browser.screenshot(args.out)
            print(f"{args.out}: {rects} frames drawn")
    finally:
        server.shutdown()


if __name__ == "__main__":
    main()
