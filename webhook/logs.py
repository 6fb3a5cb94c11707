"""One JSON object per log line, so a log pipeline can index uid, namespace, decision, reason.

Every line of the webhook's output is such an object, gunicorn's own lines included
(webhook.server.gunicorn_conf sets JsonGunicornLogger), and formatting a record never raises:
a log call with the wrong arguments still gives a line, never a `--- Logging error ---`
traceback in the middle of the log.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Any

from webhook.wire import jsonio

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

    @staticmethod
    def _message(record: logging.LogRecord) -> tuple[str, str | None]:
        """The message with its arguments, or, when they do not fit its format, the format
        as written and the arguments' repr (a wrong log call must not lose the line)."""
        try:
            return record.getMessage(), None
        except Exception:  # noqa: BLE001 - any formatting error of any argument
            try:
                return str(record.msg), repr(record.args)
            except Exception:  # noqa: BLE001 - a __str__/__repr__ that raises
                return object.__repr__(record.msg), None

    def format(self, record: logging.LogRecord) -> str:
        message, arguments = self._message(record)
        entry: dict[str, Any] = {
            "time": self._timestamp(record.created, record.msecs),
            "level": str(record.levelname).lower(),
            "logger": str(record.name),
            "msg": message,
        }
        if arguments is not None:
            entry["args"] = arguments
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            entry.update(fields)
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        try:
            return jsonio.dumps(entry, default=str).decode()
        except (TypeError, ValueError):  # fields that even str() cannot save (keys, cycles)
            entry = {k: entry[k] for k in ("time", "level", "logger", "msg", "exception")
                     if k in entry}
            entry["fields"] = repr(fields)
            return jsonio.dumps(entry, default=repr).decode()


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever sys.stderr is when a record is emitted (as logging.lastResort does):
    a command run in-process (tests, an embedding program) may swap stderr and close the old
    one, and a handler bound to the old stream would then fail on every later record."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, _value: Any) -> None:
        pass


def configure(level: str = "INFO") -> None:
    # The JSON lines carry no caller file and line, and finding them (a walk up the stack) is
    # most of a log call's cost. Process and thread stay recorded: other formatters, gunicorn's
    # `[%(process)d]` among them, need them, and without them that format raised a TypeError
    # for every record it wrote (issue 12, item 10).
    logging._srcfile = None  # noqa: SLF001 - the logging docs' own optimisation
    handler = _StderrHandler()
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)


def log_fields(logger: logging.Logger, level: int, msg: str, **fields: Any) -> None:
    logger.log(level, msg, extra={"fields": fields})
