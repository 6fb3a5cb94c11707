"""Take a screenshot of a flame graph page for the docs (docs/images): a profile rendered by the
one renderer, or a page of the results page over a results directory.

    .venv/bin/python -m tests.browser.screenshot --stacks RUN/stacks.folded --meta RUN/meta.json \
        --title demo/node-app --out graph.png
    .venv/bin/python -m tests.browser.screenshot --dir RESULTS --path /runs/NS/POD/RUN/ \
        --search fibonacci --out docs/images/results-page.png
    .venv/bin/python -m tests.browser.screenshot --page flame.html --out docs/images/demo.png
    .venv/bin/python -m tests.browser.screenshot --url http://127.0.0.1:8080/ --out index.png

--page: a page `sidecar-debug flamegraph -o` wrote; --url: a page served elsewhere, e.g. by
`sidecar-debug results open` (which sends the kubeconfig's credentials itself).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
from pathlib import Path

from werkzeug.serving import make_server

from tests.browser.cdp import Browser
from webhook.commands.cli import main as cli
from webhook.results.web import create_app


def shoot(url: str, args: argparse.Namespace) -> None:
    with Browser(args.width, args.height) as browser:
        browser.open(url)
        if args.search:
            browser.evaluate(f"const s = document.getElementById('search'); "
                             f"s.value = {json.dumps(args.search)}; "
                             "s.dispatchEvent(new Event('input'))")
        rects = browser.evaluate("document.querySelectorAll('#flame rect').length")
        args.out.parent.mkdir(parents=True, exist_ok=True)
        browser.screenshot(args.out)
        print(f"{args.out}: {rects} frames drawn")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--stacks", type=Path, help="a profile to render (folded, pprof, ...)")
    source.add_argument("--dir", type=Path, help="a results directory to serve")
    source.add_argument("--page", type=Path, help="a rendered page (HTML file)")
    source.add_argument("--url", help="a page to open as it is")
    parser.add_argument("--meta", type=Path, help="with --stacks: the run's meta.json")
    parser.add_argument("--title", help="with --stacks: the page's title")
    parser.add_argument("--path", default="/", help="with --dir: the page to open")
    parser.add_argument("--search", default="")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--height", type=int, default=760)
    args = parser.parse_args()
    if args.stacks:
        with tempfile.TemporaryDirectory() as tmp:
            page = Path(tmp) / "page.html"
            argv = ["render", str(args.stacks), "-o", str(page)]
            argv += ["--meta", str(args.meta)] if args.meta else []
            argv += ["--title", args.title] if args.title else []
            if cli(argv) != 0:
                raise SystemExit(2)
            shoot(page.as_uri(), args)
        return
    if args.page or args.url:
        shoot(args.page.resolve().as_uri() if args.page else args.url, args)
        return
    server = make_server("127.0.0.1", 0, create_app(args.dir), threaded=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        shoot(f"http://127.0.0.1:{server.server_port}{args.path}", args)
    finally:
        server.shutdown()


if __name__ == "__main__":
    main()
