"""The WSGI application gunicorn serves: settings from the environment, then create_app.

Loaded by each worker before its first request, which is also where two costs belong that would
otherwise land on reviews: importing the kubernetes client (the policy gate's first API call
would, about a second on a small node) and `gc.freeze()`, which takes every object loaded so
far (about 50,000, most of them the client's) out of the garbage collector's full collections.
Without it a full collection walks them all: pauses of about 50 ms every few hundred large
reviews on the 2-core machine of docs/performance.md.
"""

from __future__ import annotations

import gc
import importlib

from flask import Flask

from webhook import logs
from webhook.config import load_settings
from webhook.server.app import create_app

_settings = load_settings()
logs.configure(_settings.log_level)
app: Flask = create_app(_settings)
importlib.import_module("kubernetes.client")
gc.freeze()
