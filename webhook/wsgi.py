"""The WSGI application gunicorn serves: settings from the environment, then create_app."""

from __future__ import annotations

from webhook.app_factory import build_app
from webhook.routes import WebhookApp

app: WebhookApp = build_app()
