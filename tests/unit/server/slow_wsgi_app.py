"""A WSGI app that answers its pid after a short sleep (server/test_gunicorn_worker.py)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from typing import Any


def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    time.sleep(0.3)
    body = str(os.getpid()).encode()
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]
