"""One HTTP request to a sink, and what its answer means for retrying.

urllib from the standard library: two POSTs with static headers need no client library. Two
things it does by default are turned off: following redirects (it would resend the
Authorization header to wherever a redirect points, and turn the POST into a GET) and reading
an unbounded answer (only the first KiB of an error is kept, for the log; at most 64 KiB of a
success, which OTLP fills with its partial-success response).
"""

from __future__ import annotations

import http.client
import ssl
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import IO, Any

from webhook.results.export import collector
from webhook.results.export.requests import Request

MAX_ANSWER = 1024
MAX_SUCCESS_BODY = 64 << 10


@dataclass(frozen=True)
class Answer:
    """`result` is the metric's word for it: the status code, `timeout` or `connection`;
    `retry` whether another attempt may succeed; `retry_after` the server's wish (seconds);
    `message` on a success: the sink's warning; `body`: the start of a success's body."""

    ok: bool
    result: str
    retry: bool
    message: str = ""
    retry_after: float | None = None
    body: bytes = b""


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req: urllib.request.Request, fp: IO[bytes], code: int,
                         msg: str, headers: Any, newurl: str) -> None:
        return None  # urllib then raises HTTPError with the 3xx: configure the final URL


def send(request: Request, *, timeout: float, context: ssl.SSLContext | None) -> Answer:
    handlers: list[urllib.request.BaseHandler] = [_NoRedirects()]
    if context is not None:
        handlers.append(urllib.request.HTTPSHandler(context=context))
    opener = urllib.request.build_opener(*handlers)
    # S310: settings.py admits only http:// and https:// base URLs.
    outgoing = urllib.request.Request(request.url, data=request.body,  # noqa: S310
                                      headers=dict(request.headers), method=request.method)
    try:
        with opener.open(outgoing, timeout=timeout) as response:
            return Answer(True, str(response.status), False,
                          body=response.read(MAX_SUCCESS_BODY))
    except urllib.error.HTTPError as error:
        code = error.code
        data = error.read(MAX_ANSWER) if error.fp is not None else b""
        message = None
        if (error.headers.get("Content-Type") or "").startswith("application/x-protobuf"):
            message = collector.status_message(data)  # OTLP/HTTP: a google.rpc.Status
        message = _excerpt(message.encode() if message is not None else data)
        error.close()
        # Worth another try: the server is overloaded or restarting, or asked us to wait.
        retry = code in (408, 425, 429) or code >= 500
        return Answer(False, str(code), retry, f"HTTP {code}: {message or error.reason}",
                      _retry_after(error.headers.get("Retry-After")))
    except TimeoutError:
        return Answer(False, "timeout", True, f"no answer within {timeout:g} s")
    except urllib.error.URLError as error:
        reason = error.reason
        if isinstance(reason, TimeoutError):
            return Answer(False, "timeout", True, f"no answer within {timeout:g} s")
        if isinstance(reason, ssl.SSLCertVerificationError):
            return Answer(False, "tls", False, f"TLS: {reason.verify_message or reason}")
        if _tls_alert(reason):
            return Answer(False, "tls", False, f"TLS: the sink refused us: {reason}")
        return Answer(False, "connection", True, f"cannot connect: {reason}")
    except (OSError, http.client.HTTPException) as error:  # reset mid-answer, bad status line
        if _tls_alert(error):  # TLS 1.3: a client certificate refused after the handshake
            return Answer(False, "tls", False, f"TLS: the sink refused us: {error}")
        return Answer(False, "connection", True, f"connection failed: {error}")


def _tls_alert(error: object) -> bool:
    """The server's TLS alert (certificate required, unknown CA, bad certificate): waiting
    will not change it."""
    return isinstance(error, ssl.SSLError) and "ALERT" in str(getattr(error, "reason", ""))


def _excerpt(data: bytes) -> str:
    """The start of a sink's answer for one log line: no line breaks, no control characters."""
    text = " ".join(data.decode("utf-8", errors="replace").split())
    return "".join(c if c.isprintable() else "?" for c in text)[:300]


def _retry_after(value: str | None) -> float | None:
    """Retry-After in seconds (the HTTP-date form is rare for APIs and ignored)."""
    if value is None or not value.strip().isascii() or not value.strip().isdigit():
        return None
    return float(min(int(value.strip()[:6]), 86400))


def otlp_outcome(answer: Answer, reply: bytes) -> Answer:
    """A success of an OTLP sink read as OTLP says (both transports): its reply is an
    ExportProfilesServiceResponse; a partial success that rejected profiles is a refusal,
    never retried (the OTLP specification: the same data would be rejected again); rejected
    0 with a message is a success with a warning."""
    try:
        outcome = collector.export_outcome(reply)
    except ValueError as error:
        return Answer(False, "not_otlp", False, f"the answer is not OTLP's: {error} (is the "
                      "url the collector's OTLP receiver?)")
    message = _excerpt(outcome.message.encode())
    if outcome.rejected:
        return Answer(False, "partial", False, f"partial success: {outcome.rejected} "
                      f"profile(s) rejected: {message or 'no message'}")
    return Answer(True, answer.result, False, message and f"the collector warns: {message}")
