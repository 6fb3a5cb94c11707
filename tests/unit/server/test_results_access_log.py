"""The results service's access log: a line per request a person may need to read, not one per
routine poll (5,000 toolsets ask for a plan 250 times a second; /metrics counts them)."""

from __future__ import annotations

from typing import Any

import pytest
from gunicorn.config import Config

from webhook.server import results_server
from webhook.server.gunicorn_logging import JsonGunicornLogger


class Resp:
    def __init__(self, status: str) -> None:
        self.status = status


@pytest.mark.parametrize(("path", "status", "logged"), [
    ("/agent/v1/plan", "200 OK", False),
    ("/healthz", "200 OK", False),
    ("/agent/v1/plan", "403 FORBIDDEN", True),  # a refused toolset is worth a line
    ("/agent/v1/plan", "503 SERVICE UNAVAILABLE", True),
    ("/agent/v1/runs", "201 CREATED", True),
    ("/", "200 OK", True),
])
def test_only_routine_answers_are_quiet(monkeypatch: pytest.MonkeyPatch, path: str,
                                        status: str, logged: bool) -> None:
    seen: list[str] = []

    def access(self: Any, resp: Any, req: Any, environ: dict[str, Any], took: Any) -> None:
        seen.append(environ["PATH_INFO"])

    monkeypatch.setattr(JsonGunicornLogger, "access", access)
    logger = results_server._QuietProbesLogger(Config())
    logger.access(Resp(status), None, {"PATH_INFO": path}, 0.001)
    assert seen == ([path] if logged else [])
