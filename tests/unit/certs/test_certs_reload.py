"""Reload without restart: a real TLS server on 127.0.0.1 serving from reloading contexts.

What is checked: a new connection after the files change gets the new certificate; a
connection established before keeps working (and keeps its certificate); a half-written pair
(new key, old certificate) never reaches a handshake; kubelet-style symlink swaps are seen.
"""

from __future__ import annotations

import datetime as dt
import os
import socket
import socketserver
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from cryptography import x509

from webhook.certs import pki, tls

NAMES = ["localhost", "127.0.0.1"]


@pytest.fixture(scope="module")
def ca() -> pki.KeyPair:
    return pki.generate_ca()


def _pair(ca: pki.KeyPair) -> pki.KeyPair:
    return pki.generate_serving(ca, NAMES, dt.timedelta(days=1))


class _Handler(socketserver.StreamRequestHandler):
    """A line echo: enough to show a connection keeps working across a reload."""

    def handle(self) -> None:
        for line in self.rfile:
            self.wfile.write(b"echo " + line)


class _TLSServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, context: ssl.SSLContext) -> None:
        self.context = context
        super().__init__(("127.0.0.1", 0), _Handler)

    def get_request(self) -> tuple[socket.socket, object]:
        sock, addr = super().get_request()
        return self.context.wrap_socket(sock, server_side=True), addr


# The server_for fixture: starts a TLS echo server on a context, answers its port.
ServerFor = Callable[[ssl.SSLContext], int]


@pytest.fixture
def server_for() -> Iterator[ServerFor]:
    servers: list[_TLSServer] = []

    def start(context: ssl.SSLContext) -> int:
        srv = _TLSServer(context)
        threading.Thread(target=srv.serve_forever, args=(0.05,), daemon=True).start()
        servers.append(srv)
        port: int = srv.server_address[1]
        return port

    yield start
    for srv in servers:
        srv.shutdown()
        srv.server_close()


def _client_context(*cas: pki.KeyPair) -> ssl.SSLContext:
    context = ssl.create_default_context(cadata=pki.bundle_pem(c.cert for c in cas).decode())
    return context


def _connect(port: int, context: ssl.SSLContext, name: str = "127.0.0.1") -> ssl.SSLSocket:
    raw = socket.create_connection(("127.0.0.1", port), timeout=10)
    # An IP as server_hostname sends no SNI (the callback must still run); a name sends SNI.
    return context.wrap_socket(raw, server_hostname=name)


def _peer(sock: ssl.SSLSocket) -> x509.Certificate:
    der = sock.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der)


def _roundtrip(sock: ssl.SSLSocket, text: bytes) -> bytes:
    sock.sendall(text + b"\n")
    data = b""
    while not data.endswith(b"\n"):
        chunk = sock.recv(1024)
        assert chunk, "connection closed"
        data += chunk
    return data


def _write(directory: Path, pair: pki.KeyPair) -> tuple[str, str]:
    cert_file, key_file = str(directory / "tls.crt"), str(directory / "tls.key")
    tls.write_serving_pair(cert_file, key_file, pair)
    return cert_file, key_file


@pytest.mark.parametrize("sni_name", ["127.0.0.1", "localhost"])
def test_new_connections_get_the_new_certificate_in_flight_ones_keep_working(
    tmp_path: Path, ca: pki.KeyPair, server_for: ServerFor, sni_name: str
) -> None:
    first, second = _pair(ca), _pair(ca)
    cert_file, key_file = _write(tmp_path, first)
    reloader = tls.CertificateReloader(cert_file, key_file, poll_seconds=3600)
    port = server_for(reloader.ssl_context())
    client = _client_context(ca)

    in_flight = _connect(port, client, sni_name)
    assert _peer(in_flight) == first.cert
    assert _roundtrip(in_flight, b"one") == b"echo one\n"

    _write(tmp_path, second)
    assert reloader.check() is True
    assert reloader.reloads == 1

    with _connect(port, client, sni_name) as fresh:
        assert _peer(fresh) == second.cert
        assert _roundtrip(fresh, b"two") == b"echo two\n"
    # The connection opened before the swap still works and still holds the old certificate.
    assert _roundtrip(in_flight, b"three") == b"echo three\n"
    assert _peer(in_flight) == first.cert
    in_flight.close()
    assert reloader.check() is False  # nothing changed since


def test_half_written_pair_is_never_served(
    tmp_path: Path, ca: pki.KeyPair, server_for: ServerFor
) -> None:
    first, second = _pair(ca), _pair(ca)
    cert_file, key_file = _write(tmp_path, first)
    reloader = tls.CertificateReloader(cert_file, key_file, poll_seconds=3600)
    port = server_for(reloader.ssl_context())
    client = _client_context(ca)
    # write_serving_pair writes the key first: this is the moment in between.
    tls.write_private_file(key_file, second.key_pem)
    assert reloader.check() is False
    with _connect(port, client) as sock:
        assert _peer(sock) == first.cert
    tls.write_private_file(cert_file, second.cert_pem)
    assert reloader.check() is True
    with _connect(port, client) as sock:
        assert _peer(sock) == second.cert


def test_watcher_thread_picks_up_kubelet_style_symlink_swap(
    tmp_path: Path, ca: pki.KeyPair, server_for: ServerFor
) -> None:
    """kubelet mounts a Secret as KEY -> ..data/KEY with ..data -> ..TIMESTAMP, and swaps
    ..data atomically on update."""
    first, second = _pair(ca), _pair(ca)
    for version, pair in (("..v1", first), ("..v2", second)):
        (tmp_path / version).mkdir()
        _write(tmp_path / version, pair)
    (tmp_path / "..data").symlink_to("..v1")
    for name in ("tls.crt", "tls.key"):
        (tmp_path / name).symlink_to(f"..data/{name}")
    reloader = tls.CertificateReloader(
        str(tmp_path / "tls.crt"), str(tmp_path / "tls.key"), poll_seconds=0.05
    )
    port = server_for(reloader.ssl_context())
    client = _client_context(ca)
    with _connect(port, client) as sock:
        assert _peer(sock) == first.cert

    (tmp_path / "..data_tmp").symlink_to("..v2")
    os.replace(tmp_path / "..data_tmp", tmp_path / "..data")
    deadline = time.monotonic() + 10
    while reloader.reloads == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert reloader.reloads == 1
    with _connect(port, client) as sock:
        assert _peer(sock) == second.cert


def test_new_ca_is_served_and_verifies_with_the_overlap_bundle(
    tmp_path: Path, ca: pki.KeyPair, server_for: ServerFor
) -> None:
    new_ca = pki.generate_ca()
    cert_file, key_file = _write(tmp_path, _pair(ca))
    reloader = tls.CertificateReloader(cert_file, key_file, poll_seconds=3600)
    port = server_for(reloader.ssl_context())
    overlap = _client_context(ca, new_ca)
    _write(tmp_path, _pair(new_ca))
    reloader.check()
    with _connect(port, overlap) as sock:
        assert _peer(sock).issuer == new_ca.cert.subject
    with pytest.raises(ssl.SSLCertVerificationError):
        _connect(port, _client_context(ca))


def test_first_load_failure_is_loud(tmp_path: Path) -> None:
    reloader = tls.CertificateReloader(str(tmp_path / "nope.crt"), str(tmp_path / "nope.key"))
    with pytest.raises(FileNotFoundError):
        reloader.current()


def test_reloading_ssl_context_is_shared_per_file_pair(tmp_path: Path, ca: pki.KeyPair) -> None:
    cert_file, key_file = _write(tmp_path, _pair(ca))
    first = tls.reloading_ssl_context(cert_file, key_file)
    assert tls.reloading_ssl_context(cert_file, key_file) is first
    assert first.sni_callback is not None
    assert first.minimum_version >= ssl.TLSVersion.TLSv1_2


def test_sidecar_debug_serve_reloads_without_restart_keeping_keepalive_connections(
    tmp_path: Path,
) -> None:
    """The real server (`sidecar-debug serve`: gunicorn, gthread workers, the ssl_context hook)
    with certificate files replaced under it, as `certs generate` or kubelet would."""
    import http.client
    import signal
    import subprocess
    import sys

    from tests.cluster.cluster import free_port
    from webhook.commands.cli import main

    out = tmp_path / "tls"
    assert main(["certs", "generate", "--service", "s", "--namespace", "n",
                 "--out", str(out)]) == 0  # fmt: skip
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIDECAR_DEBUG_")}
    env.update({"SIDECAR_DEBUG_CERTIFICATES_MODE": "provided", "SIDECAR_DEBUG_WORKERS": "2"})
    log = (tmp_path / "serve.log").open("wb")
    server = subprocess.Popen(  # noqa: S603 - our own CLI
        [sys.executable, "-m", "webhook.commands.cli", "serve", "--port", str(port),
         "--bind-address", "127.0.0.1", "--tls-cert-file", str(out / "tls.crt"),
         "--tls-key-file", str(out / "tls.key")],
        env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    context = ssl.create_default_context(cafile=str(out / "ca.crt"))

    def connection() -> http.client.HTTPSConnection:
        conn = http.client.HTTPSConnection("localhost", port, context=context, timeout=10)
        conn.request("GET", "/healthz")
        response = conn.getresponse()
        assert response.status == 200, response.read()
        response.read()
        return conn

    def served(conn: http.client.HTTPSConnection) -> x509.Certificate:
        assert isinstance(conn.sock, ssl.SSLSocket)
        return _peer(conn.sock)

    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                kept = connection()
                break
            except OSError:
                assert server.poll() is None, (tmp_path / "serve.log").read_text()
                assert time.monotonic() < deadline, "server did not start"
                time.sleep(0.2)
        first = served(kept)
        # Same CA (reused from the folder), new serving certificate and key.
        assert main(["certs", "generate", "--service", "s", "--namespace", "n",
                     "--out", str(out)]) == 0  # fmt: skip
        renewed = pki.load_certificates((out / "tls.crt").read_bytes())[0]
        assert renewed != first
        deadline = time.monotonic() + 20
        seen: list[x509.Certificate] = []
        # Both workers must switch: keep opening connections until several in a row are new.
        while time.monotonic() < deadline and seen[-6:] != [renewed] * 6:
            conn = connection()
            seen.append(served(conn))
            conn.close()
        assert seen[-6:] == [renewed] * 6, "workers still serve the old certificate"
        # The keep-alive connection from before the swap still answers, on its old certificate.
        kept.request("GET", "/healthz")
        response = kept.getresponse()
        assert response.status == 200
        response.read()
        assert served(kept) == first
        kept.close()
        assert server.poll() is None  # no restart
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(30)
