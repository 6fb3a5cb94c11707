"""Export settings: which sinks, where, with which credentials, how patiently.

The chart passes `results.export` as JSON in SIDECAR_DEBUG_EXPORT and mounts each sink's
Secret (`existingSecret`) at /etc/sidecar-debug/export/SINK/. Everything is checked when the
process starts (ExportSettingsError names the value), so a typo fails the rollout rather than
every export. The Secret's files are read at each request: a rotated token is used without a
restart.
"""

from __future__ import annotations

import base64
import json
import re
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

ENV_EXPORT = "SIDECAR_DEBUG_EXPORT"
SECRETS_ROOT = Path("/etc/sidecar-debug/export")
SINKS = ("pyroscope", "parca", "otlp")
OTLP_PROTOCOLS = ("http/protobuf", "grpc")
# Prometheus' label names (Parca checks them); Pyroscope also allows '.', we do not need it.
_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]{0,62}$")
_RESERVED = frozenset({"__name__", "namespace", "pod", "container", "technique", "schedule"})
# OpenTelemetry attribute names (dots allowed); the ones we set from the run are not the sink's.
_ATTRIBUTE_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_.]{0,62}$")
_RESERVED_ATTRIBUTES = frozenset({"k8s.namespace.name", "k8s.pod.name", "k8s.pod.uid",
                                  "k8s.container.name", "service.name", "service.version"})
# Pyroscope's application names: letters, digits, '_', '.', '-', '/' (its labelset.go).
_APP_NAME = re.compile(r"^[a-zA-Z0-9_./-]{1,100}$")
MAX_SECRET_FILE = 64 << 10
_PEM_KEYS = frozenset({"ca.crt", "tls.crt", "tls.key"})  # several lines by nature


# An HTTP header name (RFC 9110 token), and the ones the exporter sets or the transport owns.
_HEADER_NAME = re.compile(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,100}$")
_OWN_HEADERS = frozenset({"content-type", "content-length", "content-encoding", "host",
                          "transfer-encoding", "connection", "te", "user-agent",
                          "otlp-profiles-development-version"})
MAX_HEADERS = 20


def parse_headers(text: str, where: str) -> list[tuple[str, str]]:
    """The Secret's `headers`, in the format of OTEL_EXPORTER_OTLP_HEADERS: `name=value`
    pairs separated by commas, values percent-encoded where they hold a comma (`%2C`).
    CredentialsError names what cannot be sent."""
    pairs: list[tuple[str, str]] = []
    for item in text.split(","):
        if not item.strip():
            continue
        name, equals, value = item.partition("=")
        name, value = name.strip(), unquote(value.strip())
        if not equals or not _HEADER_NAME.match(name):
            raise CredentialsError(f"{where}: {name[:50]!r} is not a header name (want "
                                   "name=value,name2=value2)")
        lowered = name.lower()
        if lowered in _OWN_HEADERS or lowered.startswith("grpc-") or lowered.endswith("-bin"):
            raise CredentialsError(f"{where}: {name} is set by the exporter or its transport")
        if not value.isprintable() or len(value) > 4096:
            raise CredentialsError(f"{where}: the value of {name} must be printable text of "
                                   "at most 4096 characters")
        pairs.append((name, value))
    if len(pairs) > MAX_HEADERS:
        raise CredentialsError(f"{where}: more than {MAX_HEADERS} headers")
    return pairs


class ExportSettingsError(ValueError):
    """A value under results.export that cannot work; the message names it."""


class CredentialsError(ValueError):
    """The mounted Secret holds something that cannot be sent (a key is missing or has a line
    break); the message names the key."""


@dataclass(frozen=True)
class SinkSettings:
    """One export sink: `kind` pyroscope, parca or otlp, its base `url`, the profile name
    (Pyroscope's application name, Parca's __name__; OTLP's protocol, http/protobuf or grpc),
    static labels (OTLP: resource attributes) added to every run's, and the directory of its
    mounted Secret (None: no credentials)."""

    kind: str
    url: str
    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    secret_dir: Path | None = None
    timeout: float = 10.0

    def endpoint(self, path: str) -> str:
        return self.url.rstrip("/") + path

    def _secret(self, key: str) -> str | None:
        if self.secret_dir is None:
            return None
        path = self.secret_dir / key
        try:
            with path.open("rb") as handle:
                data = handle.read(MAX_SECRET_FILE + 1)
        except FileNotFoundError:
            return None
        except OSError as error:
            raise CredentialsError(f"{path}: {error.strerror}") from error
        if len(data) > MAX_SECRET_FILE:
            raise CredentialsError(f"{path}: larger than {MAX_SECRET_FILE} bytes")
        text = data.decode("utf-8", errors="replace").strip()  # `echo` adds a newline
        if key not in _PEM_KEYS and any(c in text for c in "\r\n\0"):
            raise CredentialsError(f"{path}: a header value cannot hold a line break")
        return text or None

    def headers(self) -> dict[str, str]:
        """Authorization (basic from `username` + `password`, else bearer from `token`) and
        X-Scope-OrgID from `tenant`, as the Secret holds them now."""
        headers: dict[str, str] = {}
        username, password, token = (self._secret(k) for k in ("username", "password", "token"))
        if username is not None or password is not None:
            if username is None or password is None:
                raise CredentialsError(f"{self.secret_dir}: basic authentication needs both "
                                       "`username` and `password`")
            pair = base64.b64encode(f"{username}:{password}".encode()).decode()
            headers["Authorization"] = f"Basic {pair}"
        elif token is not None:
            headers["Authorization"] = f"Bearer {token}"
        tenant = self._secret("tenant")
        if tenant is not None:
            headers["X-Scope-OrgID"] = tenant
        extra = self._secret("headers")
        if extra is not None:
            where = f"{self.secret_dir}/headers"
            for name, value in parse_headers(extra, where):
                if name.lower() in {key.lower() for key in headers}:
                    raise CredentialsError(f"{where}: {name} is also set by the Secret's "
                                           "token, username/password or tenant: keep one")
                headers[name] = value
        return headers

    def ca_pem(self) -> bytes | None:
        """The Secret's `ca.crt` (None: the system's CAs), checked to be PEM certificates."""
        ca = self._secret("ca.crt")
        if ca is None:
            return None
        try:
            ssl.create_default_context(cadata=ca)
        except (ssl.SSLError, ValueError) as error:
            raise CredentialsError(f"{self.secret_dir}/ca.crt: not a PEM certificate "
                                   f"({error})") from error
        return ca.encode()

    def client_pair(self) -> tuple[bytes, bytes] | None:
        """The Secret's `tls.crt` + `tls.key` (a kubernetes.io/tls Secret's keys), the client
        certificate for a collector that asks for one (mutual TLS); None without them."""
        cert, key = self._secret("tls.crt"), self._secret("tls.key")
        if cert is None and key is None:
            return None
        if cert is None or key is None:
            raise CredentialsError(f"{self.secret_dir}: a client certificate needs both "
                                   "`tls.crt` and `tls.key`")
        self._load_pair(ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT))  # the pair matches
        return cert.encode(), key.encode()

    def _load_pair(self, context: ssl.SSLContext) -> None:
        assert self.secret_dir is not None  # noqa: S101 - client_pair found the files
        try:
            context.load_cert_chain(self.secret_dir / "tls.crt", self.secret_dir / "tls.key")
        except (ssl.SSLError, OSError, ValueError) as error:
            raise CredentialsError(f"{self.secret_dir}/tls.crt, tls.key: not a PEM certificate "
                                   f"and its unencrypted key ({error})") from error

    def tls_context(self) -> ssl.SSLContext | None:
        """For https: the system's CAs, or the Secret's `ca.crt` when it has one; the client
        certificate `tls.crt` + `tls.key` when it has them."""
        if not self.url.startswith("https:"):
            return None
        ca = self._secret("ca.crt")
        try:
            context = (ssl.create_default_context(cadata=ca) if ca
                       else ssl.create_default_context())
        except (ssl.SSLError, ValueError) as error:
            raise CredentialsError(f"{self.secret_dir}/ca.crt: not a PEM certificate "
                                   f"({error})") from error
        if self.client_pair() is not None:
            self._load_pair(context)
        return context


@dataclass(frozen=True)
class ExportSettings:
    """The sinks and the queue every one of them gets: at most `queue_size` runs waiting,
    `attempts` tries per run (the first included), waits from `backoff` seconds doubling up to
    `max_backoff`."""

    sinks: tuple[SinkSettings, ...] = ()
    queue_size: int = 100
    attempts: int = 5
    backoff: float = 2.0
    max_backoff: float = 300.0

    @classmethod
    def from_environ(cls, environ: Mapping[str, str], *,
                     secrets_root: Path = SECRETS_ROOT) -> ExportSettings:
        text = environ.get(ENV_EXPORT, "").strip()
        if not text:
            return cls()
        try:
            raw = json.loads(text)
        except ValueError as error:
            raise ExportSettingsError(f"{ENV_EXPORT}: not JSON ({error})") from error
        return cls.from_mapping(raw, secrets_root=secrets_root)

    @classmethod
    def from_mapping(cls, raw: Any, *, secrets_root: Path = SECRETS_ROOT,
                     where: str = "results.export") -> ExportSettings:
        _require(isinstance(raw, dict), where, "must be an object")
        # egressTo is the chart's (the NetworkPolicy): known, not used here.
        known = {"queueSize", "attempts", "backoffSeconds", "timeoutSeconds", "egressTo", *SINKS}
        unknown = sorted(set(raw) - known)
        _require(not unknown, where, f"unknown field(s) {unknown}; known: {sorted(known)}")
        timeout = _number(raw, "timeoutSeconds", 10.0, 0.1, 600, where)
        sinks = []
        for kind in SINKS:
            sink = _sink(kind, raw.get(kind), timeout, secrets_root, f"{where}.{kind}")
            if sink is not None:
                sinks.append(sink)
        return cls(sinks=tuple(sinks),
                   queue_size=int(_number(raw, "queueSize", 100, 1, 100_000, where, True)),
                   attempts=int(_number(raw, "attempts", 5, 1, 100, where, True)),
                   backoff=_number(raw, "backoffSeconds", 2.0, 0.0, 3600, where))


def _require(condition: bool, where: str, problem: str) -> None:
    if not condition:
        raise ExportSettingsError(f"{where}: {problem}")


def _number(raw: Mapping[str, Any], key: str, default: float, low: float, high: float,
            where: str, integer: bool = False) -> float:
    value = raw.get(key, default)
    kind = int if integer else (int, float)
    _require(isinstance(value, kind) and not isinstance(value, bool) and low <= value <= high,
             f"{where}.{key}", f"must be {'an integer' if integer else 'a number'} from "
             f"{low:g} to {high:g}, got {value!r}")
    return float(value)


def _sink(kind: str, raw: Any, timeout: float, secrets_root: Path,
          where: str) -> SinkSettings | None:
    if raw is None:
        return None
    _require(isinstance(raw, dict), where, "must be an object")
    name_key = {"pyroscope": "applicationName", "parca": "profileName",
                "otlp": "protocol"}[kind]
    labels_key = "resourceAttributes" if kind == "otlp" else "labels"
    known = {"url", labels_key, "existingSecret", name_key}
    unknown = sorted(set(raw) - known)
    _require(not unknown, where, f"unknown field(s) {unknown}; known: {sorted(known)}")
    url = raw.get("url") or ""
    _require(isinstance(url, str), f"{where}.url", "must be a string")
    if not url:
        return None  # the chart's default: this sink is off
    parts = urlsplit(url)
    _require(parts.scheme in ("http", "https") and bool(parts.hostname),
             f"{where}.url", f"must be an http:// or https:// URL, got {url!r}")
    _require(not parts.query and not parts.fragment and not parts.username,
             f"{where}.url", "the base URL only (no query, fragment or user: credentials go "
             "in existingSecret)")
    if kind == "otlp":
        # OTLP/HTTP with binary protobuf, or OTLP/gRPC (the scheme chooses TLS or plaintext).
        name = raw.get(name_key) or "http/protobuf"
        _require(name in OTLP_PROTOCOLS, f"{where}.{name_key}",
                 f"must be one of {list(OTLP_PROTOCOLS)}, got {name!r}")
        _require(name != "grpc" or parts.path in ("", "/"), f"{where}.url",
                 "a gRPC endpoint is host and port only (https://collector:4317 for TLS, "
                 f"http://collector:4317 for plaintext), got the path {parts.path!r}")
    else:
        default_name = "sidecar-debug" if kind == "pyroscope" else "process_cpu"
        name = raw.get(name_key) or default_name
        pattern = _APP_NAME if kind == "pyroscope" else _LABEL_NAME
        _require(isinstance(name, str) and bool(pattern.match(name)), f"{where}.{name_key}",
                 f"must match {pattern.pattern}, got {name!r}")
    labels = raw.get(labels_key) or {}
    _require(isinstance(labels, dict), f"{where}.{labels_key}", "must be an object")
    key_pattern, reserved, noun, characters = (
        (_ATTRIBUTE_NAME, _RESERVED_ATTRIBUTES, "an attribute name", "letters, digits, '_', '.'")
        if kind == "otlp" else (_LABEL_NAME, _RESERVED, "a label name", "letters, digits, '_'"))
    for key, value in labels.items():
        _require(bool(key_pattern.match(key)) and key not in reserved, f"{where}.{labels_key}",
                 f"{key!r} is not {noun} we may set ({characters}; not one of "
                 f"{sorted(reserved)})")
        _require(isinstance(value, str) and value.isprintable() and len(value) <= 200,
                 f"{where}.{labels_key}.{key}",
                 "must be printable text of at most 200 characters")
    secret = raw.get("existingSecret") or ""
    _require(isinstance(secret, str), f"{where}.existingSecret", "must be a string")
    return SinkSettings(kind=kind, url=url, name=name, labels=dict(labels),
                        secret_dir=secrets_root / kind if secret else None, timeout=timeout)
