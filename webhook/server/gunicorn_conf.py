"""gunicorn settings (`gunicorn -c python:webhook.server.gunicorn_conf webhook.server.wsgi:app`).

Everything comes from the same Settings the app uses (environment set by `sidecar-debug serve`).
"""

from __future__ import annotations

import os
import ssl
from typing import Any

from webhook.certs import rotation, tls
from webhook.config import load_settings
from webhook.wire import constants

_settings = load_settings()

bind = [f"{_settings.bind_address}:{_settings.port}"]
workers = _settings.workers
# gthread (threads keep a worker answering while another request waits on a
# SubjectAccessReview) that accepts connections only while a thread is idle, so the apiserver's
# kept-alive connections spread over the workers (webhook/server/gunicorn_worker.py).
worker_class = "webhook.server.gunicorn_worker.BalancedThreadWorker"
threads = _settings.threads
# The heartbeat file must not live on a (possibly read-only, possibly disk-backed) root fs.
worker_tmp_dir = "/dev/shm" if os.path.isdir("/dev/shm") else None  # noqa: S108
# The apiserver keeps connections open between reviews; reusing them saves a TLS handshake.
keepalive = 75
timeout = 30
graceful_timeout = 20
accesslog = None
errorlog = "-"
# gunicorn's lines in the webhook's JSON format (webhook/logs.py).
logger_class = "webhook.server.gunicorn_logging.JsonGunicornLogger"
loglevel = _settings.log_level.lower()
certfile = _settings.tls_cert_file
keyfile = _settings.tls_key_file
proc_name = constants.PRODUCT
# No runtime-management socket: nothing uses it, and a read-only root filesystem has no home for it.
control_socket_disable = True


def ssl_context(config: Any, default_ssl_context_factory: Any) -> ssl.SSLContext:
    """A context that switches to a renewed certificate without a restart (webhook.certs)."""
    return tls.reloading_ssl_context(config.certfile, config.keyfile)


def when_ready(server: Any) -> None:
    # In `self` mode the master renews the Secret, rewrites the files the workers watch and
    # restores a blanked caBundle; other modes have nothing to maintain.
    if _settings.tls_cert_file and _settings.tls_key_file:
        rotation.start_background_maintenance(
            _settings, _settings.tls_cert_file, _settings.tls_key_file
        )


def child_exit(server: Any, worker: Any) -> None:
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(worker.pid)  # type: ignore[no-untyped-call]
