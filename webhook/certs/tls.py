"""Serving with reload, and the private files it reads.

`reloading_ssl_context` gives new handshakes the newest certificate files while established
connections keep the certificate they were set up with."""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import ssl
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from webhook.certs.pki import (
    KEY_CA_CRT,
    KEY_CA_KEY,
    KEY_TLS_CRT,
    KEY_TLS_KEY,
    CertificateError,
    KeyPair,
    load_certificates,
)

if TYPE_CHECKING:
    from webhook.config import Settings

log = logging.getLogger(__name__)


def write_private_file(path: Path | str, data: bytes, mode: int = 0o600) -> None:
    """Write `data` atomically (temporary file + rename) with `mode` from the first byte on."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_bundle(
    directory: Path | str, ca: KeyPair, serving: KeyPair, write_ca_key: bool = False
) -> dict[str, Path]:
    """Write ca.crt, tls.crt, tls.key (and ca.key) into `directory`; keys are mode 0600."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    files = {
        KEY_CA_CRT: (ca.cert_pem, 0o644),
        KEY_TLS_CRT: (serving.cert_pem, 0o644),
        KEY_TLS_KEY: (serving.key_pem, 0o600),
    }
    if write_ca_key:
        files[KEY_CA_KEY] = (ca.key_pem, 0o600)
    written: dict[str, Path] = {}
    for name, (data, mode) in files.items():
        write_private_file(directory / name, data, mode)
        written[name] = directory / name
    return written


def private_directory() -> str:
    """A fresh 0700 directory in memory (/dev/shm) when possible, else in $TMPDIR."""
    base = "/dev/shm"  # noqa: S108 - a private mkdtemp below, not a fixed name
    if not (os.path.isdir(base) and os.access(base, os.W_OK | os.X_OK)):
        base = tempfile.gettempdir()
    return tempfile.mkdtemp(prefix="sidecar-debug-tls-", dir=base)


def write_serving_pair(cert_file: str, key_file: str, serving: KeyPair) -> bool:
    """Write the pair when it differs from what is on disk; True when something was written.

    The key goes first: the reloader only accepts a cert and key that match, so a reader that
    sees the new key with the old certificate retries on its next poll."""
    cert_pem, key_pem = serving.cert_pem, serving.key_pem
    with contextlib.suppress(OSError):
        if Path(cert_file).read_bytes() == cert_pem and Path(key_file).read_bytes() == key_pem:
            return False
    write_private_file(key_file, key_pem)
    write_private_file(cert_file, cert_pem)
    return True


def _file_signature(*paths: str) -> str:
    digest = hashlib.sha256()
    for path in paths:
        digest.update(Path(path).read_bytes())
        digest.update(b"\0")
    return digest.hexdigest()


def server_context(cert_file: str, key_file: str) -> ssl.SSLContext:
    """A plain server context for one certificate pair (TLS 1.2+)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert_file, key_file)
    return context


@dataclass
class CertificateReloader:
    """Holds the newest fully loaded SSLContext for a cert/key file pair.

    A fresh context is built for every change and the reference swapped in one step, so a
    handshake never sees a half-loaded context (loading into a live context sets the
    certificate and the key in two calls). Files are compared by content, which also covers
    kubelet's symlink swap of mounted Secrets."""

    cert_file: str
    key_file: str
    poll_seconds: float = 1.0
    configure: Callable[[ssl.SSLContext], None] | None = None
    _signature: str = ""
    _context: ssl.SSLContext | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _thread: threading.Thread | None = None
    _pid: int = 0
    _outer: ssl.SSLContext | None = None
    reloads: int = 0

    def _build(self) -> ssl.SSLContext:
        context = server_context(self.cert_file, self.key_file)
        if self.configure is not None:
            self.configure(context)
        return context

    def check(self) -> bool:
        """Reload when the files changed and load cleanly; True when a new context is live."""
        try:
            before = _file_signature(self.cert_file, self.key_file)
            if before == self._signature:
                return False
            context = self._build()
            # A writer may have replaced a file between reading and loading: only accept a
            # context whose files did not move underneath it.
            if _file_signature(self.cert_file, self.key_file) != before:
                return False
        except (OSError, ssl.SSLError) as exc:
            # Half-written pair (new key, old cert) or a missing file: keep the current one.
            log.debug("certificate reload deferred: %s", exc)
            return False
        with self._lock:
            first = self._context is None
            self._context, self._signature = context, before
            if not first:
                self.reloads += 1
        if not first:
            log.info("serving certificate reloaded from %s", self.cert_file)
        return True

    def current(self) -> ssl.SSLContext:
        self._ensure_watching()
        with self._lock:
            context = self._context
        if context is None:
            # The first load must succeed: fail loudly rather than serve nothing.
            context = self._build()
            with self._lock:
                self._context = context
                self._signature = _file_signature(self.cert_file, self.key_file)
        return context

    def _ensure_watching(self) -> None:
        # Threads do not survive fork (gunicorn workers): start one per process, lazily.
        if self._thread is not None and self._pid == os.getpid() and self._thread.is_alive():
            return
        with self._lock:
            if self._thread is not None and self._pid == os.getpid() and self._thread.is_alive():
                return
            self._pid = os.getpid()
            self._thread = threading.Thread(
                target=self._watch, name="sidecar-debug-tls-reload", daemon=True
            )
            self._thread.start()

    def _watch(self) -> None:
        while True:
            time.sleep(self.poll_seconds)
            self.check()

    def ssl_context(self) -> ssl.SSLContext:
        """A server context whose handshakes switch to the newest loaded certificate.

        The outer context carries the initial certificate; its SNI callback (run by OpenSSL
        for every ClientHello, with or without SNI) moves the connection to the current
        context before the certificate is chosen. Established connections keep theirs."""
        if self._outer is not None:
            return self._outer
        self.current()  # first load (raises if the files are unusable) and the watcher
        outer = self._build()

        def switch(sock: Any, server_name: str | None, _ctx: ssl.SSLContext) -> None:
            newest = self.current()
            if sock.context is not newest:
                sock.context = newest

        outer.sni_callback = switch
        self._outer = outer
        return outer


_reloaders: dict[tuple[str, str], CertificateReloader] = {}


_reloaders_lock = threading.Lock()


def certificate_reloader(cert_file: str, key_file: str) -> CertificateReloader:
    """One reloader per file pair and process."""
    with _reloaders_lock:
        reloader = _reloaders.get((cert_file, key_file))
        if reloader is None:
            reloader = CertificateReloader(cert_file, key_file)
            reloader.check()
            _reloaders[(cert_file, key_file)] = reloader
        return reloader


def reloading_ssl_context(cert_file: str, key_file: str) -> ssl.SSLContext:
    """A server SSLContext that picks up new certificate files without a restart."""
    return certificate_reloader(cert_file, key_file).ssl_context()


class BundleFile:
    """A PEM CA bundle read from a file, again only when the file changed (size, mtime): the
    webhook reads the results service's CA for every injection. Empty when unreadable or not
    PEM certificates (the caller then injects no results wiring and says so)."""

    def __init__(self, path: str | None) -> None:
        self.path = path
        self._signature: tuple[int, int] | None = None
        self._text = ""
        self._lock = threading.Lock()

    def read(self) -> str:
        if not self.path:
            return ""
        try:
            info = os.stat(self.path)
        except OSError:
            return ""
        signature = (info.st_size, info.st_mtime_ns)
        with self._lock:
            if signature != self._signature:
                try:
                    data = Path(self.path).read_bytes()[: 1 << 20]
                    text = data.decode("ascii") if load_certificates(data) else ""
                except (OSError, ValueError, UnicodeDecodeError, CertificateError):
                    text = ""
                self._signature, self._text = signature, text
            return self._text


def results_ca_file(settings: Settings) -> str | None:
    """Where the CA bundle the toolsets trust for the results service is: resultsCaFile, else
    ca.crt beside the webhook's serving certificate (the mounted Secret in certManager and
    provided modes; the private directory `self` mode writes)."""
    if settings.results_ca_file:
        return settings.results_ca_file
    if settings.tls_cert_file:
        return os.path.join(os.path.dirname(settings.tls_cert_file), KEY_CA_CRT)
    return None
