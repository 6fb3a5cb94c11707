"""Serving a plain-HTTP WSGI app (the results page) the way the webhook is served: gunicorn with
the webhook's worker, so a slow or idle client is dropped at the same handshake/header/body
deadlines instead of holding one of a development server's threads for ever."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

from gunicorn.app.base import BaseApplication

from webhook.server.gunicorn_logging import JsonGunicornLogger
from webhook.server.gunicorn_worker import PLAIN_BIND_ENV

# Answered often and alike: the kubelet's probes, and every toolset's plan request (a fleet of
# 5,000 pods asks 250 times a second). Counted on /metrics by route and code; a refused plan is
# still logged.
QUIET_PATHS = ("/healthz", "/agent/v1/plan")


class _QuietProbesLogger(JsonGunicornLogger):
    """One JSON access line per request, except successful probes and plan polls."""

    def access(self, resp: Any, req: Any, environ: dict[str, Any], request_time: Any) -> None:
        quiet = str(environ.get("PATH_INFO", "")).startswith(QUIET_PATHS) and \
            str(getattr(resp, "status", "")).startswith("200")
        if not quiet:
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


def raise_open_files(wanted: int) -> int:
    """Lift this process's soft limit of open files towards `wanted` (never above the hard
    limit); the limit now in force."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    return soft if soft != resource.RLIM_INFINITY else wanted


def serve_wsgi(app: Any, host: str, port: int, threads: int = 4, *,
               keepalive: int = 5, max_connections: int = 1000,
               tls: tuple[str, str] | None = None, plain_bind: str | None = None,
               post_worker_init: Callable[[Any], None] | None = None,
               on_listening: Callable[[list[str]], None] | None = None) -> None:
    """Serve `app` until SIGTERM/SIGINT (gunicorn's master handles both). `tls` (certificate
    and key files, reloaded when they change, as the webhook's) serves HOST:PORT over TLS;
    `plain_bind` (a loopback HOST:PORT) is then a second, plain listener. `post_worker_init`
    runs in the serving process after gunicorn forked it (threads start there);
    `on_listening` gets the URLs of the bound listeners (`http://127.0.0.1:8080`: the real
    port when PORT was 0) once gunicorn listens."""
    options: dict[str, Any] = {
        "bind": [f"{host}:{port}"] + ([plain_bind] if plain_bind else []),
        "workers": 1,
        "worker_class": "webhook.server.gunicorn_worker.PlainLoopbackWorker",
        "threads": threads,
        "timeout": 30,
        "graceful_timeout": 10,
        "keepalive": keepalive,
        "worker_connections": max_connections,
        "accesslog": "-",
        "errorlog": "-",
        "logger_class": _QuietProbesLogger,
        "control_socket_disable": True,
        # The heartbeat file must not need a writable root filesystem.
        "worker_tmp_dir": "/dev/shm" if os.path.isdir("/dev/shm") else None,  # noqa: S108
    }
    limit = raise_open_files(max_connections + 256)
    if limit < max_connections + 256:
        print(f"the open-files limit is {limit}: at most about {max(limit - 256, 0)} "
              f"connections at once instead of {max_connections} (raise the container's "
              "nofile limit)", file=sys.stderr, flush=True)
    if plain_bind:
        os.environ[PLAIN_BIND_ENV] = plain_bind
    if tls is not None:
        from webhook.certs import tls as certs_tls

        options["certfile"], options["keyfile"] = tls
        options["ssl_context"] = lambda config, default: certs_tls.reloading_ssl_context(
            config.certfile, config.keyfile)
    if post_worker_init is not None:
        options["post_worker_init"] = post_worker_init
    if on_listening is not None:
        options["when_ready"] = lambda server: on_listening(
            [str(listener) for listener in server.LISTENERS])
    _Application(app, options).run()
