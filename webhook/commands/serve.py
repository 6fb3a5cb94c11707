"""`sidecar-debug serve`: validate everything, then hand over to gunicorn over TLS."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

from webhook.config import load_settings
from webhook.wire import constants


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "serve",
        help="run the admission webhook (gunicorn over TLS)",
        description="Run the mutating admission webhook. Settings come from --config, "
        f"{constants.ENV_PREFIX}* environment variables and these flags (flags win).",
    )
    parser.add_argument("--config", help="YAML settings file (camelCase keys)")
    parser.add_argument("--tls-cert-file", help="serving certificate (PEM)")
    parser.add_argument("--tls-key-file", help="serving key (PEM)")
    parser.add_argument("--port", type=int, help="HTTPS port (default 8443)")
    parser.add_argument("--bind-address", help="address to listen on (default 0.0.0.0)")
    parser.add_argument("--workers", type=int, help="gunicorn worker processes")
    parser.add_argument("--policy-path", help="policy file or directory")
    parser.set_defaults(func=serve)


def serve(args: argparse.Namespace) -> int:
    overrides = {
        "tls_cert_file": args.tls_cert_file,
        "tls_key_file": args.tls_key_file,
        "port": args.port,
        "bind_address": args.bind_address,
        "workers": args.workers,
        "policy_path": args.policy_path,
    }
    settings = load_settings(args.config, overrides=overrides)
    from webhook.server.app import serving_files

    cert_file, key_file = serving_files(settings)  # errors: webhook.commands.errors
    env = dict(os.environ)
    if args.config:
        env[constants.ENV_PREFIX + "CONFIG"] = os.path.abspath(args.config)
    for name, value in overrides.items():
        if value is not None:
            env[constants.ENV_PREFIX + name.upper()] = str(value)
    env[constants.ENV_PREFIX + "TLS_CERT_FILE"] = cert_file
    env[constants.ENV_PREFIX + "TLS_KEY_FILE"] = key_file
    # One metrics directory per server, so counts from every worker add up on /metrics.
    shm = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None  # noqa: S108
    env["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="sidecar-debug-metrics-", dir=shm)
    argv = [
        sys.executable,
        "-m",
        "gunicorn",
        "-c",
        "python:webhook.server.gunicorn_conf",
        "webhook.server.wsgi:app",
    ]
    os.execve(sys.executable, argv, env)  # noqa: S606 - replaces this process with gunicorn
    return 0  # pragma: no cover
