"""One OTLP/gRPC export: the ExportProfilesServiceRequest to the ProfilesService Export method,
and what its status means for retrying.

grpcio, gRPC's own Python implementation (imported here only, so a process without a gRPC
sink never loads it). `url` chooses the channel: https:// is TLS (the system's CAs, or the
Secret's `ca.crt`; its `tls.crt` + `tls.key` as the client certificate), http:// is plaintext
(a collector in the cluster's network, as an OpenTelemetry SDK's `insecure`). The credentials
and the Secret's `headers` go as call metadata (`authorization`, `x-scope-orgid`, ...), the
deadline is the sink's timeout. A channel is kept per sink and process
and made anew when the process forked (a gRPC channel does not survive fork) or the Secret's
CA or client certificate changed.

Statuses retried (the OTLP specification's retryable ones): UNAVAILABLE, DEADLINE_EXCEEDED,
CANCELLED, ABORTED, OUT_OF_RANGE, DATA_LOSS, and RESOURCE_EXHAUSTED (bounded by `attempts`:
the RetryInfo that would say whether the server recovers is not read), but not a message
larger than the receiver takes (`too_large`); every other is a refusal. A TLS handshake that
fails is a refusal too, as for HTTP.
"""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from webhook.results.export import collector
from webhook.results.export.requests import Request
from webhook.results.export.send import Answer, otlp_outcome
from webhook.results.export.settings import CredentialsError, SinkSettings

if TYPE_CHECKING:
    import grpc

_RETRIED = frozenset({"UNAVAILABLE", "DEADLINE_EXCEEDED", "CANCELLED", "ABORTED",
                      "OUT_OF_RANGE", "DATA_LOSS", "RESOURCE_EXHAUSTED"})
# What grpc core says in an UNAVAILABLE status when the handshake, not the server, failed
# ("Tls handshake failed (TSI_PROTOCOL_FAILURE): SSL_ERROR_SSL: ...CERTIFICATE_VERIFY_FAILED");
# whole phrases, so that a host name holding "tls" does not make a DNS failure a TLS one.
_TLS_WORDS = ("handshake failed", "certificate_verify_failed", "ssl_error")
_CONNECT_WORDS = ("failed to connect", "connection refused", "dns resolution failed",
                  "name resolution", "connection reset", "socket closed", "connect failed")
_USER_AGENT = "sidecar-debug"


_Key = tuple[int, str, bytes | None, tuple[bytes, bytes] | None]


class _Channel:
    def __init__(self, key: _Key, channel: grpc.Channel) -> None:
        self.key = key
        self.channel = channel
        # No serializers: the request's bytes go as they are, the reply comes back as bytes.
        self.export: grpc.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(
            collector.GRPC_METHOD)


_CHANNELS: dict[tuple[str, str], _Channel] = {}
_LOCK = threading.Lock()


def _channel(sink: SinkSettings, target: str, secure: bool, ca: bytes | None,
             pair: tuple[bytes, bytes] | None) -> _Channel:
    import grpc

    key: _Key = (os.getpid(), target, ca, pair) if secure else (os.getpid(), target, None, None)
    with _LOCK:
        found = _CHANNELS.get((sink.kind, sink.url))
        if found is not None and found.key == key:
            return found
        if found is not None and found.key[0] == key[0]:
            found.channel.close()  # the CA changed; in a forked child, leave the parent's be
        options = [("grpc.primary_user_agent", _USER_AGENT)]
        if secure:
            credentials = grpc.ssl_channel_credentials(
                root_certificates=ca, private_key=pair[1] if pair else None,
                certificate_chain=pair[0] if pair else None)
            channel = grpc.secure_channel(target, credentials, options=options)
        else:
            channel = grpc.insecure_channel(target, options=options)
        made = _Channel(key, channel)
        _CHANNELS[(sink.kind, sink.url)] = made
        return made


def close(sink: SinkSettings) -> None:
    """Close this process's channel to the sink, if it made one."""
    with _LOCK:
        found = _CHANNELS.get((sink.kind, sink.url))
        if found is not None and found.key[0] == os.getpid():
            del _CHANNELS[(sink.kind, sink.url)]
            found.channel.close()


def target_of(url: str) -> tuple[str, bool]:
    """(host:port for grpc, TLS?) of the sink's URL (settings.py admits host and port only);
    no port: 443 for https, 80 for http, as the chart's NetworkPolicy opens."""
    parts = urlsplit(url)
    secure = parts.scheme == "https"
    if parts.port is not None:
        return parts.netloc, secure
    return f"{parts.netloc}:{443 if secure else 80}", secure


def send(request: Request, *, timeout: float, sink: SinkSettings) -> Answer:
    import grpc

    target, secure = target_of(request.url)
    try:
        ca = sink.ca_pem() if secure else None
        pair = sink.client_pair() if secure else None
    except CredentialsError as error:
        return Answer(False, "credentials", False, str(error))
    channel = _channel(sink, target, secure, ca, pair)
    # The version and the credentials (sink.headers(), merged in by the exporter), in lower
    # case as HTTP/2 wants metadata keys.
    metadata = tuple((key.lower(), value) for key, value in request.headers.items())
    try:
        reply = channel.export(request.body, timeout=timeout, metadata=metadata,
                               wait_for_ready=False)
    except grpc.RpcError as error:
        return _failure(error, timeout)
    return otlp_outcome(Answer(True, "ok", False), reply if isinstance(reply, bytes) else b"")


def _failure(error: grpc.RpcError, timeout: float) -> Answer:
    code = error.code() if hasattr(error, "code") else None
    details = error.details() if hasattr(error, "details") else None
    name = getattr(code, "name", "UNKNOWN")
    text = " ".join(str(details or "").split())[:300]
    lowered = text.lower()
    if name == "DEADLINE_EXCEEDED":
        return Answer(False, "timeout", True, f"no answer within {timeout:g} s")
    if name == "RESOURCE_EXHAUSTED" and "larger than max" in lowered:
        return Answer(False, "too_large", False, f"the collector takes smaller messages "
                      f"(the Collector's otlp receiver: grpc max_recv_msg_size_mib): {text}")
    if name == "UNAVAILABLE" and any(word in lowered for word in _TLS_WORDS):
        return Answer(False, "tls", False, f"TLS: {text}")
    if name == "UNAVAILABLE" and any(word in lowered for word in _CONNECT_WORDS):
        return Answer(False, "connection", True, f"cannot connect: {text}")
    return Answer(False, name.lower(), name in _RETRIED, f"gRPC {name}: {text}")
