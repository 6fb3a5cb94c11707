"""Serving a plain-HTTP WSGI app (the results page) the way the webhook is served: gunicorn with
the webhook's worker, so a slow or idle client is dropped at the same handshake/header/body
deadlines instead of holding one of a development server's threads for ever."""

from __future__ import annotations

import os
from typing import Any

from gunicorn.app.base import BaseApplication

from webhook.server.gunicorn_logging import JsonGunicornLogger


class _QuietProbesLogger(JsonGunicornLogger):
    """One JSON access line per request, except the kubelet's probes (one every few seconds)."""

    def access(self, resp: Any, req: Any, environ: dict[str, Any], request_time: Any) -> None:
        if not str(environ.get("PATH_INFO", "")).startswith("/healthz"):
            super().access(resp, req, environ, request_time)


class _Application(BaseApplication):  # type: ignore[misc]  # gunicorn ships no types
    def __init__(self, app: Any, options: dict[str, Any]) -> None:
        self.application = app
        self.options = options
        super().__init__()

    def load_config(self) -> None:
        for key, value in self.options.items():
            self.cfg.set(key, value)

    def load(self) -> Any:
        return self.application


def serve_wsgi(app: Any, host: str, port: int, threads: int = 4) -> None:
    """Serve `app` until SIGTERM/SIGINT (gunicorn's master handles both)."""
    _Application(
        app,
        {
            "bind": [f"{host}:{port}"],
            "workers": 1,
            "worker_class": "webhook.server.gunicorn_worker.BalancedThreadWorker",
            "threads": threads,
            "timeout": 30,
            "graceful_timeout": 10,
            "keepalive": 5,
            "accesslog": "-",
            "errorlog": "-",
            "logger_class": _QuietProbesLogger,
            "control_socket_disable": True,
            # The heartbeat file must not need a writable root filesystem.
            "worker_tmp_dir": "/dev/shm" if os.path.isdir("/dev/shm") else None,  # noqa: S108
        },
    ).run()
