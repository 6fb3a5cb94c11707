"""`sidecar-debug results serve|list|prune` on a local directory: the page listens on this
machine only unless asked and says where; prune shows what it removes, has a dry run, and 0
means "no limit" as in the chart; the list counts a run's samples from its stacks when its
meta.json has no count."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from webhook.commands.cli import main
from webhook.results.store import META_NAME, Store
from webhook.stacks import folded

STACKS = folded.parse("main;fib 9\nmain;gc 1\n")


def _runs(root: Path, count: int, *, age: timedelta = timedelta(0)) -> list[str]:
    store = Store(root)
    now = datetime.now(UTC) - age
    return [store.save("shop", "web-1", "perf", STACKS, started=now - timedelta(minutes=i)).id
            for i in range(count)]


def test_prune_dry_run_prints_what_would_go_and_removes_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ids = _runs(tmp_path, 3)
    assert main(["results", "prune", "--dir", str(tmp_path), "--keep", "1", "--dry-run"]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines() == [f"would remove {ids[1]}", f"would remove {ids[2]}"]
    assert "would remove 2 runs (dry run: nothing removed)" in err
    assert len(Store(tmp_path).runs()) == 3
    assert main(["results", "prune", "--dir", str(tmp_path), "--keep", "1"]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines() == [f"removed {ids[1]}", f"removed {ids[2]}"]
    assert "removed 2 runs" in err
    assert [run.id for run in Store(tmp_path).runs()] == ids[:1]


@pytest.mark.parametrize("flags", [["--keep", "0"], ["--max-age", "0d"],
                                   ["--keep", "0", "--max-age", "0s"]])
def test_zero_means_no_limit_as_in_the_chart(
        tmp_path: Path, flags: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """results.retention.count: 0 keeps every run; `--keep 0` (which once deleted every run)
    does the same and says how to remove runs instead."""
    _runs(tmp_path, 3, age=timedelta(days=2))
    assert main(["results", "prune", "--dir", str(tmp_path), *flags]) == 0
    out, err = capsys.readouterr()
    assert out == "" and "nothing to remove: 0 means no limit" in err
    assert "--keep 1 or more, or --max-age" in err
    assert len(Store(tmp_path).runs()) == 3


def test_keep_zero_with_an_age_prunes_by_age_only(tmp_path: Path) -> None:
    old = _runs(tmp_path, 2, age=timedelta(days=40))
    store = Store(tmp_path)
    fresh = store.save("shop", "web-2", "perf", STACKS, started=datetime.now(UTC)).id
    assert main(["results", "prune", "--dir", str(tmp_path), "--keep", "0",
                 "--max-age", "30d"]) == 0
    assert [run.id for run in Store(tmp_path).runs()] == [fresh]
    assert old


def test_list_counts_samples_from_the_stacks_when_meta_has_none(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    [with_meta] = _runs(tmp_path, 1)
    run = Store(tmp_path).get(with_meta)
    meta = json.loads((run.path / META_NAME).read_text())
    del meta["samples"], meta["hottest"]
    (run.path / META_NAME).write_text(json.dumps(meta))
    lost = Store(tmp_path).save("shop", "web-2", "perf", STACKS, started=datetime.now(UTC))
    (lost.path / META_NAME).unlink()
    assert main(["results", "list", "--dir", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert sorted(lines) == sorted([f"{with_meta}\t10 samples", f"{lost.id}\t10 samples"])
    again = Store(tmp_path).get(lost.id)
    assert again.hottest[0] == ("fib", 9) and again.seconds is None


@contextmanager
def _serving(root: Path, *flags: str) -> Iterator[tuple[str, Path]]:
    """`results serve` on port 0: the URL it prints once it listens, and its log."""
    log = root / "serve.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "webhook.commands.cli", "results", "serve", "--dir",
             str(root), "--port", "0", *flags], stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while True:
            found = re.search(r"results page on (http://\S+/) ", log.read_text())
            if found:
                break
            if time.monotonic() > deadline or process.poll() is not None:
                pytest.fail(f"no URL printed: {log.read_text()}")
            time.sleep(0.1)
        time.sleep(0.2)  # the lines printed with it
        yield found.group(1), log
    finally:
        process.terminate()
        process.wait(timeout=20)


def test_serve_listens_on_this_machine_by_default_and_prints_the_real_url(
        tmp_path: Path) -> None:
    _runs(tmp_path, 1)
    with _serving(tmp_path) as (url, log):
        assert url.startswith("http://127.0.0.1:") and not url.endswith(":0/")  # the real port
        with urllib.request.urlopen(url, timeout=10) as page:  # noqa: S310 - http:// above
            assert page.status == 200 and b"shop" in page.read()
        assert "no authentication" in log.read_text()
        assert "warning: listening on" not in log.read_text()


def test_serve_on_every_interface_says_who_can_read(tmp_path: Path) -> None:
    with _serving(tmp_path, "--host", "0.0.0.0") as (url, log):  # noqa: S104
        assert url.startswith("http://0.0.0.0:")
        text = log.read_text()
    assert "warning: listening on 0.0.0.0, not only this machine: anyone who can reach the " \
        "port reads every run in the directory" in text


def test_loopback_addresses() -> None:
    from webhook.commands import results

    assert results._loopback("127.0.0.1") and results._loopback("::1")
    assert results._loopback("localhost") and results._loopback("127.0.0.2")
    assert not results._loopback("0.0.0.0") and not results._loopback("::")  # noqa: S104
    assert not results._loopback("192.168.1.5") and not results._loopback("example.com")
