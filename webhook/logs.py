"""One JSON object per log line, so a log pipeline can index uid, namespace, decision, reason."""

from __future__ import annotations

import logging
import sys
import time
from typing import Any

from webhook import jsonio

REVIEW_LOGGER = "webhook.admission.mutate"  # the review log: one line per AdmissionReview


class JsonFormatter(logging.Formatter):
    # (second, its formatted text): one line per review, so one strftime per second is enough.
    _second: tuple[int, str] = (-1, "")

    def _timestamp(self, created: float, msecs: float) -> str:
        second = self._second
        if second[0] != int(created):
            second = (int(created), time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(created)))
            self._second = second  # one assignment: threads see the old pair or the new one
        return f"{second[1]}.{int(msecs):03d}Z"

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": self._timestamp(record.created, record.msecs),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            entry.update(fields)
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return jsonio.dumps(entry, default=str).decode()


def configure(level: str = "INFO") -> None:
    # The JSON lines carry none of these, and collecting them (a walk up the stack for the
    # caller's file and line, the process and thread names) is most of a log call's cost.
    logging._srcfile = None  # noqa: SLF001 - the logging docs' own optimisation
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)


def log_fields(logger: logging.Logger, level: int, msg: str, **fields: Any) -> None:
    logger.log(level, msg, extra={"fields": fields})
