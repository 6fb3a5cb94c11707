"""gunicorn's own log lines (start, workers booting and exiting, errors) as the same JSON objects
as the webhook's (webhook.logs), so that the whole output of `sidecar-debug serve` is one format
a log pipeline can read."""

from __future__ import annotations

from typing import Any

from gunicorn import glogging

from webhook.logs import JsonFormatter


class JsonGunicornLogger(glogging.Logger):  # type: ignore[misc]  # gunicorn ships no types
    def setup(self, cfg: Any) -> None:
        super().setup(cfg)
        for log in (self.error_log, self.access_log):
            for handler in log.handlers:
                handler.setFormatter(JsonFormatter())
