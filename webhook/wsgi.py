"""The WSGI application gunicorn serves: settings from the environment, then create_app."""

from __future__ import annotations

from flask import Flask

from webhook.app_factory import build_app

app: Flask = build_app()
