"""The webhook's own log (issue 12, item 10): every gunicorn worker used to log
`--- Logging error --- TypeError: %d format: a real number is required, not NoneType`, because
webhook.logs switched off the recording of process ids and gunicorn's format prints
`[%(process)d]`. Now no record can make a formatter raise, and the served output is one JSON
object per line from start to graceful stop."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.unit.core_helpers import admission_review
from tests.unit.server.serving import post, serve, stop
from webhook import logs

GUNICORN_FORMAT = "%(asctime)s [%(process)d] [%(levelname)s] %(message)s"


@pytest.fixture
def configured() -> Iterator[None]:
    """webhook.logs.configure() as a worker runs it, undone afterwards."""
    root = logging.getLogger()
    saved = (root.handlers[:], root.level, logging._srcfile)  # noqa: SLF001
    logs.configure("INFO")
    try:
        yield
    finally:
        root.handlers[:], level, logging._srcfile = saved  # noqa: SLF001
        root.setLevel(level)


def _record(msg: object, args: tuple[object, ...] | None, **extra: object) -> logging.LogRecord:
    record = logging.getLogger("test").makeRecord(
        "test", logging.WARNING, __file__, 1, msg, args or (), None, extra=extra or None)
    return record


def test_records_made_after_configure_format_with_gunicorns_format(configured: None) -> None:
    record = _record("Worker exiting (pid: %s)", (123,))
    line = logging.Formatter(GUNICORN_FORMAT).format(record)
    assert "Worker exiting (pid: 123)" in line


class _Unprintable:
    def __str__(self) -> str:
        raise RuntimeError("no str")

    def __repr__(self) -> str:
        raise RuntimeError("no repr")


@pytest.mark.parametrize(
    ("msg", "args", "fields", "expected_msg"),
    [
        ("count %d", (None,), None, "count %d"),
        ("two %s %s", ("one",), None, "two %s %s"),
        ("no placeholders", ("extra",), None, "no placeholders"),
        (_Unprintable(), None, None, None),
        ("fine", None, {("tuple", "key"): 1, "self": None}, "fine"),
        ("fine", None, {"object": object(), "bytes": b"\xff"}, "fine"),
    ],
    ids=["none-for-%d", "too-few-args", "too-many-args", "unprintable", "tuple-key", "objects"],
)
def test_json_formatter_never_raises(
    msg: object, args: tuple[object, ...] | None, fields: object, expected_msg: str | None
) -> None:
    record = _record(msg, args, fields=fields) if fields else _record(msg, args)
    entry = json.loads(logs.JsonFormatter().format(record))
    assert entry["level"] == "warning" and entry["logger"] == "test"
    if expected_msg is not None:
        assert entry["msg"] == expected_msg


def test_json_formatter_keeps_the_exception() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        record = logging.getLogger("test").makeRecord(
            "test", logging.ERROR, __file__, 1, "failed", (), sys.exc_info())
    entry = json.loads(logs.JsonFormatter().format(record))
    assert "ValueError: boom" in entry["exception"]


def _assert_clean_json_output(output: str) -> list[dict[str, object]]:
    assert "Logging error" not in output, output[-3000:]
    assert "Traceback" not in output, output[-3000:]
    entries = []
    for line in output.splitlines():
        try:
            entries.append(json.loads(line))
        except ValueError:
            raise AssertionError(f"not a JSON log line: {line!r}") from None
    return entries


def test_served_output_is_json_lines_without_logging_errors(tmp_path: Path) -> None:
    """Start (two workers), reviews, refusals, graceful stop: the whole output of
    `sidecar-debug serve`, gunicorn's own lines included."""
    pod = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "a", "image": "b"}]}}
    with serve(tmp_path, {"SIDECAR_DEBUG_WORKERS": "2"}) as served:
        for _ in range(4):
            status, _ = post(served, "/mutate", json.dumps(admission_review(pod)).encode())
            assert status == 200
        assert post(served, "/mutate", b"{")[0] == 400
        assert post(served, "/nope", b"{}")[0] == 404
        stop(served.process)
        entries = _assert_clean_json_output(served.output())
    messages = [str(e["msg"]) for e in entries]
    assert any(m.startswith("Booting worker") for m in messages), messages
    assert any(m.startswith("Worker exiting") for m in messages), messages
    assert any(e["logger"] == logs.REVIEW_LOGGER for e in entries)
