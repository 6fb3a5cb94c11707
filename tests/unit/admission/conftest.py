"""The `tracebacks` fixture: no record logged anywhere during the test may carry a traceback."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest


class Tracebacks(logging.Handler):
    """Every record logged anywhere that carries a traceback (exc_info, stack or the text)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.found: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if record.exc_info or record.stack_info or "Traceback" in text:
            self.found.append(f"{record.name}: {text[:200]}")


@pytest.fixture
def tracebacks() -> Iterator[Tracebacks]:
    """Collects tracebacks at the webhook's production level (INFO) and fails the test at the
    end if there was one; a test may also check and clear `found` as it goes."""
    handler = Tracebacks()
    root = logging.getLogger()
    old_level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:
        yield handler
    finally:
        root.removeHandler(handler)
        root.setLevel(old_level)
    assert handler.found == [], handler.found
