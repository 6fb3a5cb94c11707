"""A small Chrome DevTools Protocol client for the browser tests: start Debian's headless
chromium, open a page, evaluate JavaScript in it, take a screenshot. Only websocket-client."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Any

import websocket

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")


def chromium_path() -> str | None:
    for name in CHROMIUM_NAMES:
        path = shutil.which(name)
        if path:
            return path
    return None


class Browser:
    """Headless chromium with one page, driven over the DevTools protocol."""

    def __init__(self, width: int = 1400, height: int = 900) -> None:
        path = chromium_path()
        if path is None:
            raise RuntimeError("no chromium: apt-get install chromium (scripts/setup.sh does)")
        self.profile = tempfile.mkdtemp(prefix="sidecar-debug-chromium-")
        self.process = subprocess.Popen(
            [path, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
             "--no-first-run", "--no-default-browser-check", "--disable-extensions",
             "--remote-debugging-port=0", "--remote-allow-origins=*",
             f"--user-data-dir={self.profile}", f"--window-size={width},{height}",
             "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        port_file = Path(self.profile) / "DevToolsActivePort"
        deadline = time.monotonic() + 60
        while not (port_file.exists() and port_file.read_text().strip()):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.close()
                raise RuntimeError("chromium did not start its DevTools endpoint")
            time.sleep(0.1)
        port = int(port_file.read_text().split()[0])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as reply:
            targets = json.load(reply)
        page = next(t for t in targets if t.get("type") == "page")
        self.socket = websocket.create_connection(page["webSocketDebuggerUrl"], timeout=30)
        self.next_id = 0
        self.events: list[dict[str, Any]] = []
        self.call("Page.enable")
        self.call("Runtime.enable")

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        self.next_id += 1
        ident = self.next_id
        self.socket.send(json.dumps({"id": ident, "method": method, "params": params}))
        while True:
            message = json.loads(self.socket.recv())
            if message.get("id") == ident:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                result: dict[str, Any] = message.get("result", {})
                return result
            self.events.append(message)

    def wait_event(self, method: str, timeout: float = 30) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            for index, event in enumerate(self.events):
                if event.get("method") == method:
                    return self.events.pop(index)
            if time.monotonic() > deadline:
                raise TimeoutError(f"no {method} within {timeout} s")
            self.socket.settimeout(max(0.1, deadline - time.monotonic()))
            self.events.append(json.loads(self.socket.recv()))

    def open(self, url: str) -> None:
        self.events.clear()
        self.call("Page.navigate", url=url)
        self.wait_event("Page.loadEventFired")

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True,
                           awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def add_init_script(self, source: str) -> None:
        """Run `source` in every page before the page's own scripts (outside its CSP)."""
        self.call("Page.addScriptToEvaluateOnNewDocument", source=source)

    def allow_downloads(self, directory: Path) -> None:
        self.downloads = directory
        self.call("Browser.setDownloadBehavior", behavior="allowAndName",
                  downloadPath=str(directory), eventsEnabled=True)

    def wait_download(self, timeout: float = 30) -> tuple[str, Path]:
        """(suggested file name, saved path) of the next download, once it is complete."""
        begun = self.wait_event("Browser.downloadWillBegin", timeout)["params"]
        deadline = time.monotonic() + timeout
        while True:
            progress = self.wait_event("Browser.downloadProgress",
                                       max(0.1, deadline - time.monotonic()))["params"]
            if progress["guid"] == begun["guid"] and progress["state"] != "inProgress":
                assert progress["state"] == "completed", progress
                return begun["suggestedFilename"], self.downloads / begun["guid"]

    def console_errors(self) -> list[str]:
        return [json.dumps(e["params"]) for e in self.events
                if e.get("method") == "Runtime.exceptionThrown"]

    def screenshot(self, path: Path) -> None:
        data = self.call("Page.captureScreenshot", format="png", captureBeyondViewport=False)
        path.write_bytes(base64.b64decode(data["data"]))

    def close(self) -> None:
        sock = getattr(self, "socket", None)
        if sock is not None:
            sock.close()
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.close()
