"""Debug files by build-id through a real debuginfod server (Debian's `debuginfod`, serving the
debug file of a C binary this test builds and strips), and through hostile servers: the
stripped binary's functions become named, what a server sends is capped in size and time and
must be the build-id asked for, and the cache never writes or reads through a link."""

from __future__ import annotations

import http.server
import os
import shutil
import socket
import subprocess
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.unit.toolset.conftest import ROOT

HOT_C = ROOT / "samples" / "c" / "hot.c"


@pytest.fixture(scope="module")
def lib(common: ModuleType) -> dict[str, ModuleType]:
    import importlib

    return {name: importlib.import_module(name)
            for name in ("debuginfo", "elf_frames", "recording")}


@dataclass
class Built:
    stripped: Path  # the binary as released: no .symtab, a .gnu_debuglink
    debug: Path  # its debug file (objcopy --only-keep-debug), what the server serves
    build_id: str
    functions: dict[str, int]  # name -> link-time address, from the unstripped build


def build(directory: Path, name: str, extra: list[str] | None = None) -> Built:
    if shutil.which("gcc") is None or shutil.which("objcopy") is None:
        pytest.skip("gcc and binutils are needed (scripts/setup.sh)")
    directory.mkdir(parents=True, exist_ok=True)
    full = directory / f"{name}.full"
    subprocess.run(["gcc", "-O2", "-g", "-fomit-frame-pointer", "-Wl,--build-id",
                    *(extra or []), "-o", str(full), str(HOT_C)], check=True)
    debug, stripped = directory / f"{name}.debug", directory / name
    subprocess.run(["objcopy", "--only-keep-debug", str(full), str(debug)], check=True)
    subprocess.run(["objcopy", "--strip-all", f"--add-gnu-debuglink={debug}", str(full),
                    str(stripped)], check=True)
    notes = subprocess.run(["readelf", "-n", str(stripped)], check=True, capture_output=True,
                           text=True).stdout
    build_id = notes.split("Build ID:")[1].split()[0]
    symbols = subprocess.run(["nm", str(full)], check=True, capture_output=True,
                             text=True).stdout
    functions = {parts[2]: int(parts[0], 16) for parts in
                 (line.split() for line in symbols.splitlines()) if len(parts) == 3
                 and parts[1] in "tT"}
    full.unlink()
    return Built(stripped, debug, build_id, functions)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    return build(tmp_path_factory.mktemp("hot"), "hot")


@pytest.fixture(scope="module")
def server(built: Built, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Debian's debuginfod serving the directory that holds only the debug file."""
    if shutil.which("debuginfod") is None:
        pytest.skip("debuginfod is not installed (scripts/setup.sh installs it)")
    work = tmp_path_factory.mktemp("debuginfod")
    served = work / "served"
    served.mkdir()
    shutil.copy(built.debug, served / built.debug.name)
    port = free_port()
    log = (work / "log").open("w")
    process = subprocess.Popen(["debuginfod", "-F", "-p", str(port), "-d",
                                str(work / "db.sqlite"), "-t", "0", "-g", "0", str(served)],
                               stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:  # up, and done scanning the directory
            try:
                with urllib.request.urlopen(  # noqa: S310 - the test's own http URL
                        f"{url}/buildid/{built.build_id}/debuginfo", timeout=5) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            assert process.poll() is None, (work / "log").read_text()
            assert time.monotonic() < deadline, (work / "log").read_text()
            time.sleep(0.2)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=10)
        log.close()


@pytest.fixture
def running(built: Built) -> Iterator[subprocess.Popen[bytes]]:
    process = subprocess.Popen([str(built.stripped)], stdout=subprocess.DEVNULL)
    time.sleep(0.2)  # mapped
    yield process
    process.kill()
    process.wait()


def frame_at(lib: dict[str, ModuleType], pid: int, path: Path, vaddr: int) -> Any:
    """The frame the toolset names for link-time address `vaddr` of the PIE `path` in the
    running process `pid`, through the recording's own opener and unwinder (as py-spy's
    native frames are named)."""
    base = next(int(line.split("-")[0], 16) for line in Path(f"/proc/{pid}/maps").read_text()
                .splitlines() if line.endswith(str(path)) and line.split()[2] == "00000000")
    unwinder = lib["recording"].PyspyNamer(pid).unwinder
    return unwinder.name_at(base + vaddr, unwinder.mapping(base + vaddr))


@pytest.fixture
def private(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    directory = tmp_path / "private"
    monkeypatch.setenv("SIDECAR_DEBUG_PRIVATE_DIR", str(directory))
    return directory


def test_a_stripped_binary_is_named_through_debuginfod_and_its_cache(
        lib: dict[str, ModuleType], built: Built, server: str, private: Path,
        running: subprocess.Popen[bytes], monkeypatch: pytest.MonkeyPatch) -> None:
    start = built.functions["fib_recursive"]
    # Without a server: the hidden function stays [BINARY+0xSTART].
    monkeypatch.delenv("DEBUGINFOD_URLS", raising=False)
    unnamed = frame_at(lib, running.pid, built.stripped, start + 4)
    assert (unnamed.name, unnamed.named) == (f"[hot+{start:#x}]", False)
    monkeypatch.setenv("DEBUGINFOD_URLS", f"file:///nowhere {server}")
    opener_names = lib["recording"].PyspyNamer(running.pid)
    named = frame_at(lib, running.pid, built.stripped, start + 4)
    assert (named.name, named.named) == ("fib_recursive", True)
    assert frame_at(lib, running.pid, built.stripped,
                    built.functions["main"] + 2).name == "main"
    cached = private / "debuginfod" / f"{built.build_id}.debug"
    assert cached.read_bytes() == built.debug.read_bytes()
    assert oct(cached.stat().st_mode & 0o777) == "0o600"
    assert [p.name for p in cached.parent.iterdir()] == [cached.name]  # no .part left
    # The cache answers without the server (one that is gone).
    monkeypatch.setenv("DEBUGINFOD_URLS", f"http://127.0.0.1:{free_port()}")
    again = lib["debuginfo"].DebugInfo()
    assert again.find(built.build_id, "/usr/bin/hot") is not None
    assert again.found == {"hot": "debuginfod (cached)"}
    assert opener_names.opener.debuginfo.problems == [
        "DEBUGINFOD_URLS: file:///nowhere is not an http(s) URL: not used"]


def test_the_image_debug_directory_comes_first_and_nothing_is_asked_unset(
        lib: dict[str, ModuleType], built: Built, tmp_path: Path) -> None:
    hostile = Hostile(lambda handler: handler.send_error(500))
    with hostile:
        directory = tmp_path / "debug" / built.build_id[:2]
        directory.mkdir(parents=True)
        shutil.copy(built.debug, directory / f"{built.build_id[2:]}.debug")
        found = lib["debuginfo"].DebugInfo({"DEBUGINFOD_URLS": hostile.url},
                                           dirs=(str(tmp_path / "debug"),),
                                           cache=str(tmp_path / "cache"))
        assert found.find(built.build_id, "hot") is not None
        assert found.found == {"hot": "debug-dir"}
        unset = lib["debuginfo"].DebugInfo({}, dirs=(), cache=str(tmp_path / "cache"))
        assert unset.find(built.build_id, "hot") is None
        assert hostile.requests == 0
        assert not (tmp_path / "cache").exists()


# --- hostile servers -------------------------------------------------------------------------

class Hostile:
    """An HTTP server answering every request with `answer(handler)`."""

    def __init__(self, answer: Callable[[http.server.BaseHTTPRequestHandler], None]) -> None:
        owner = self
        self.requests = 0

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                owner.requests += 1
                try:
                    answer(self)
                except OSError:
                    pass  # the client hung up: what the caps are for

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.httpd.block_on_close = False
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self) -> Hostile:
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def send(body: bytes, length: int | None = None) -> Callable[[Any], None]:
    def answer(handler: Any) -> None:
        handler.send_response(200)
        handler.send_header("Content-Length", str(len(body) if length is None else length))
        handler.end_headers()
        handler.wfile.write(body)
    return answer


def endless(handler: Any) -> None:
    """No Content-Length: a body that never ends, as fast as the client reads."""
    handler.send_response(200)
    handler.send_header("Connection", "close")
    handler.end_headers()
    while True:
        handler.wfile.write(b"\0" * 65536)


def trickle(handler: Any) -> None:
    handler.send_response(200)
    handler.send_header("Content-Length", "1000000")
    handler.end_headers()
    for _ in range(100):
        handler.wfile.write(b"\x7f")
        handler.wfile.flush()
        time.sleep(0.2)


def stall(handler: Any) -> None:
    handler.send_response(200)
    handler.send_header("Content-Length", "1000000")
    handler.end_headers()
    handler.wfile.write(b"\x7fELF")
    handler.wfile.flush()
    time.sleep(5)


def fetch(lib: dict[str, ModuleType], answer: Callable[[Any], None], build_id: str,
          cache: Path, **environ: str) -> tuple[Any, Any, Hostile, float]:
    with Hostile(answer) as hostile:
        found = lib["debuginfo"].DebugInfo({"DEBUGINFOD_URLS": hostile.url, **environ},
                                           dirs=(), cache=str(cache))
        started = time.monotonic()
        elf = found.find(build_id, "/usr/lib/libhot.so")
        return elf, found, hostile, time.monotonic() - started


def test_a_server_sending_another_build_id_is_refused(
        lib: dict[str, ModuleType], built: Built, tmp_path: Path) -> None:
    other = build(tmp_path / "other", "other", ["-O1"])  # other code
    assert other.build_id != built.build_id
    elf, found, _, _ = fetch(lib, send(other.debug.read_bytes()), built.build_id,
                             tmp_path / "cache")
    assert elf is None
    assert found.problems == [
        f"debuginfod: no debug file for libhot.so (build-id {built.build_id}): "
        f"{found.config.urls[0]}: it is the debug file of build-id {other.build_id}, "
        f"not {built.build_id}"]
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == [f"{built.build_id}.miss"]


def test_a_server_sending_garbage_is_refused(lib: dict[str, ModuleType], built: Built,
                                            tmp_path: Path) -> None:
    elf, found, _, _ = fetch(lib, send(b"<html>not found</html>" * 10), built.build_id,
                             tmp_path / "cache")
    assert elf is None
    assert found.problems[0].endswith(
        ": what it sent is not a 64-bit little-endian ELF file"), found.problems


@pytest.mark.parametrize("answer", [send(b"", 10 << 30), endless], ids=["announced", "endless"])
def test_a_huge_debug_file_is_refused_at_the_size_cap(
        lib: dict[str, ModuleType], built: Built, tmp_path: Path,
        answer: Callable[[Any], None]) -> None:
    elf, found, _, _ = fetch(lib, answer, built.build_id, tmp_path / "cache",
                             DEBUGINFOD_MAXSIZE=str(1 << 20))
    assert elf is None
    assert "DEBUGINFOD_MAXSIZE (1 MiB)" in found.problems[0], found.problems
    assert [p.name for p in (tmp_path / "cache").iterdir()] == [f"{built.build_id}.miss"]


@pytest.mark.parametrize("answer", [trickle, stall], ids=["trickle", "stall"])
def test_a_slow_server_is_refused_at_the_time_cap(lib: dict[str, ModuleType], built: Built,
                                                  tmp_path: Path,
                                                  answer: Callable[[Any], None]) -> None:
    elf, found, _, took = fetch(lib, answer, built.build_id, tmp_path / "cache",
                                DEBUGINFOD_MAXTIME="1")
    assert elf is None
    assert "not sent within 1 s (DEBUGINFOD_MAXTIME)" in found.problems[0], found.problems
    assert took < 2.5


def test_a_missing_build_id_is_not_asked_again_for_a_while(
        lib: dict[str, ModuleType], built: Built, tmp_path: Path) -> None:
    with Hostile(lambda handler: handler.send_error(404)) as hostile:
        for _ in range(3):
            found = lib["debuginfo"].DebugInfo({"DEBUGINFOD_URLS": hostile.url}, dirs=(),
                                               cache=str(tmp_path / "cache"))
            assert found.find(built.build_id, "hot") is None
            assert found.problems == []  # not having it is no problem
        assert hostile.requests == 1
        miss = tmp_path / "cache" / f"{built.build_id}.miss"
        old = time.time() - lib["debuginfo"].MISS_SECONDS - 1
        os.utime(miss, (old, old))
        assert found.__class__({"DEBUGINFOD_URLS": hostile.url}, dirs=(),
                               cache=str(tmp_path / "cache")).find(built.build_id, "h") is None
        assert hostile.requests == 2


def test_a_link_in_the_cache_is_neither_read_nor_written_through(
        lib: dict[str, ModuleType], built: Built, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    (cache / f"{built.build_id}.debug").symlink_to(built.debug)  # would even name it
    (cache / f"{built.build_id}.miss").symlink_to(victim)
    elf, found, hostile, _ = fetch(lib, send(built.debug.read_bytes()), built.build_id, cache)
    assert elf is None and hostile.requests == 0
    assert "not used for libhot.so" in found.problems[0], found.problems
    assert victim.read_bytes() == b"precious"


def test_settings_that_are_not_numbers_are_ignored_with_a_reason(
        lib: dict[str, ModuleType]) -> None:
    config = lib["debuginfo"].config({"DEBUGINFOD_URLS": "https://debuginfod.example/ ftp://x",
                                      "DEBUGINFOD_MAXSIZE": "-1", "DEBUGINFOD_MAXTIME": "soon"})
    assert config.urls == ("https://debuginfod.example",)
    assert config.max_size == lib["debuginfo"].DEFAULT_MAXSIZE
    assert config.problems == [
        "DEBUGINFOD_URLS: ftp://x is not an http(s) URL: not used",
        "DEBUGINFOD_MAXSIZE=-1 is not a number in (0, 17179869184]: 536870912 used",
        "DEBUGINFOD_MAXTIME=soon is not a number in (0, 600]: 30.0 used"]
    for endless in ("inf", "nan", "1e9"):
        config = lib["debuginfo"].config({"DEBUGINFOD_MAXTIME": endless})
        assert config.max_time == 30.0 and len(config.problems) == 1, endless


def test_the_cache_keeps_at_most_twice_the_size_cap_dropping_the_least_recently_used(
        lib: dict[str, ModuleType], built: Built, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    size = built.debug.stat().st_size
    for age, name in enumerate(["old", "recent"]):
        (cache / f"{name}.debug").write_bytes(b"\0" * size)
        os.utime(cache / f"{name}.debug", (1000 + age, 1000 + age))
    (cache / "gone.miss").write_bytes(b"")
    # 2 x the cap holds 2.5 files: the new one and the more recently used one stay.
    cap = size * 5 // 4
    elf, found, _, _ = fetch(lib, send(built.debug.read_bytes()), built.build_id, cache,
                             DEBUGINFOD_MAXSIZE=str(cap))
    assert elf is not None, found.problems
    assert sorted(p.name for p in cache.iterdir()) == [
        f"{built.build_id}.debug", "gone.miss", "recent.debug"]
