"""`sidecar-debug render`: every input format to a page, stdin to stdout, a differential page,
the run's meta.json on the page, and a one-line summary."""

from __future__ import annotations

import gzip
import io
import json
from pathlib import Path

import pytest

from tests.unit.render.pagedata import drawn, page_data
from webhook.commands.cli import main
from webhook.stacks import folded, pprof, speedscope

FOLDED = "main;handle;fib 60\nmain;handle;render 15\nmain;[unknown] 25\n"


@pytest.mark.parametrize(("name", "content"), [
    ("run.folded", FOLDED.encode()),
    ("run.txt.gz", gzip.compress(FOLDED.encode())),
    ("run.json", speedscope.encode(folded.parse(FOLDED), "x")),
    ("run.pb.gz", pprof.encode(folded.parse(FOLDED))),
])
def test_each_format_becomes_a_page_next_to_it(
        name: str, content: bytes, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / name
    source.write_bytes(content)
    assert main(["render", str(source)]) == 0
    page = tmp_path / "run.html"
    data = page_data(page.read_text())
    assert drawn(data) == folded.parse(FOLDED)
    assert data["title"] == name and data["named"]["source"] == "frames"
    err = capsys.readouterr().err
    assert err.startswith(f"{page}: ")
    assert "samples: 100; named frames: 90.9 % (computed from the frame names, 275 " in err
    assert err.count("\n") == 1


def test_stdin_to_stdout_with_a_title_and_meta(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    meta = tmp_path / "meta.json"
    meta.write_text(json.dumps({"technique": "perf", "type": "cpu", "seconds": 10,
                                "named_share": 0.96, "warnings": ["user-space only"]}))
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(FOLDED.encode())))
    assert main(["render", "-", "--title", "web <1>", "--meta", str(meta)]) == 0
    data = page_data(capsys.readouterr().out)
    assert data["title"] == "web <1>"
    assert data["named"] == {"share": 0.96, "source": "meta.json"}
    assert ("technique", "perf") in map(tuple, data["facts"])
    assert ("duration", "10 s") in map(tuple, data["facts"])
    assert data["warnings"] == ["user-space only"]


def test_a_differential_page(tmp_path: Path) -> None:
    (tmp_path / "a.folded").write_text("main;fib 80\nmain;io 20\n")
    (tmp_path / "b.folded").write_text("main;fib 20\nmain;json 30\n")
    out = tmp_path / "diff.html"
    assert main(["render", str(tmp_path / "b.folded"), "--diff", str(tmp_path / "a.folded"),
                 "-o", str(out)]) == 0
    data = page_data(out.read_text())
    assert data["differential"] is True and data["title"] == "a.folded -> b.folded"
    assert drawn(data, "before") == {("main", "fib"): 80, ("main", "io"): 20, ("main", "json"): 0}
    assert data["scale"] == 0.5 and data["totals"] == [100, 50]
    assert drawn(data) == {("main", "fib"): 20, ("main", "io"): 0, ("main", "json"): 30}


def test_a_differential_graph_of_two_units_is_refused(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """Go's CPU profile (nanoseconds) against folded samples: no scale makes them comparable."""
    fixtures = Path(__file__).resolve().parents[2] / "fixtures" / "profiles"
    assert main(["render", str(fixtures / "go-cpu.pb.gz"), "--diff",
                 str(fixtures / "perf-go.folded"), "-o", str(tmp_path / "d.html")]) == 2
    err = capsys.readouterr().err
    assert "perf-go.folded counts samples (folded) and" in err
    assert "go-cpu.pb.gz counts ns (pprof): a differential graph compares profiles of one unit" \
        in err
    assert not (tmp_path / "d.html").exists()


def test_bytes_that_are_not_utf8_are_a_warning_on_the_page_and_stderr(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "latin1.folded").write_bytes(b"main;caf\xe9 3\n")
    assert main(["render", str(tmp_path / "latin1.folded"), "-o", str(tmp_path / "p.html")]) == 0
    warning = "1 invalid UTF-8 byte sequence replaced by U+FFFD \ufffd (the first on line 1)"
    assert f"warning: {tmp_path / 'latin1.folded'}: {warning}" in capsys.readouterr().err
    data = page_data((tmp_path / "p.html").read_text())
    assert data["warnings"] == [f"{tmp_path / 'latin1.folded'}: {warning}"]
