"""gunicorn's gthread worker with two changes the webhook needs: a thread is given a connection
only once a whole request has arrived on it, and the worker accepts only while a thread is idle.

**Slow clients cannot occupy the threads.** Stock gthread hands a new connection to a thread,
which then does the TLS handshake and reads the request with blocking calls and no deadline:
8 connections that send nothing (or a header byte now and then) held all 2 x 4 threads and no
review was answered (issue 12). Here the worker's event loop does the handshake and reads the
request head and body without blocking, each step against a deadline (`tlsHandshakeTimeoutSeconds`,
`requestHeaderTimeoutSeconds`, `requestBodyTimeoutSeconds`); a connection that misses one is
closed. Kept-alive connections wait in the same loop (`keepalive` seconds). So a thread only ever
parses bytes that are already in memory, runs the app and writes the answer; hundreds of stalled
connections cost a file descriptor and a few hundred bytes each, not a thread. A body larger
than `maxRequestBytes` goes to the app as soon as its head is in (the app refuses it with 413)
and the connection is closed after the answer, the loop discarding what the client still sends
(up to 4x the limit, within the body deadline) so the client reads the 413 rather than a reset.

**Connections spread over the workers.** The apiserver keeps its connections to a webhook open
and sends every review over them, so which worker process answers is settled when a connection
is accepted. Stock gthread workers accept whatever arrives while they have room for a thousand
connections; a burst of new connections lands on whichever worker wakes first. Measured on
2 cores with 8 connections, one worker got every one of them in 4 of 10 runs: half the machine
idle, less than half the throughput, about three times the latency (docs/performance.md,
"Worker class and count"). This worker stops accepting while all its threads are busy, so a busy
worker leaves new connections to an idle one. Connections still on their way in (handshake,
request not complete) hold no thread, so they do not stop a worker from accepting.

Everything but `handle` runs on the worker's main thread (accept, the event callbacks and the
finish callback all run from its event loop), so the connection states need no lock.
"""

from __future__ import annotations

import errno
import os
import selectors
import socket
import ssl
import time
from dataclasses import dataclass
from functools import partial
from typing import Any

from gunicorn import http, util
from gunicorn import sock as gunicorn_sock
from gunicorn.http.errors import NoMoreData
from gunicorn.http.unreader import SocketUnreader
from gunicorn.workers.gthread import STOP_KEEPALIVE_LINGER, TConn, ThreadWorker

from webhook.config import load_settings

PLAIN_BIND_ENV = "SIDECAR_DEBUG_RESULTS_PLAIN_BIND"
# Largest request head (request line and headers) read before a thread gets the connection;
# gunicorn's parser then applies its own limits (limit_request_line, limit_request_fields).
MAX_HEAD_BYTES = 64 * 1024
# How often the event loop looks for connections past their deadline.
SWEEP_SECONDS = 0.25
RECV_BYTES = 65536


@dataclass(frozen=True)
class Deadlines:
    """Seconds a client has for each step, and the body size the app accepts."""

    handshake: float = 5.0
    header: float = 5.0
    body: float = 10.0
    max_body: int = 3 * 1024 * 1024


class _DeadlineUnreader(SocketUnreader):  # type: ignore[misc]  # gunicorn ships no types
    """Reads of a thread past what the event loop buffered (a body the app refuses, a head
    over MAX_HEAD_BYTES) end at `deadline`, however slowly the client drips its bytes."""

    deadline = float("inf")

    def chunk(self, size_hint: int | None = None) -> bytes:
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("the client did not send its request in time")
        self.sock.settimeout(remaining)
        data: bytes = super().chunk(size_hint)
        return data


class _Conn(TConn):  # type: ignore[misc]
    """A connection and where it is in the event loop: "handshake", "idle" (kept alive, no
    byte of the next request yet), "head", "body" or "closing" (answer sent, discarding)."""

    def __init__(self, cfg: Any, sock: socket.socket, client: Any, server: Any) -> None:
        super().__init__(cfg, sock, client, server)
        self.state = "head"
        self.deadline = 0.0
        self.events = 0  # what the poller watches for (0: not registered)
        self.closed = False
        self.buf = bytearray()
        self.head_scan = 0  # where to look for the end of the head next
        self.body_start = -1
        self.length: int | None = None  # Content-Length, None while unknown or chunked
        self.chunked = False
        self.chunk_scan = 0  # chunked: start of the next chunk-size line in buf
        self.continue_sent = False
        self.complete = False  # the whole request was read before the thread got it
        self.discarded = 0

    def start_http(self) -> None:
        """TLS is up (or there is none): the HTTP parser reads what the loop buffers."""
        self.initialized = True  # TConn.init() has nothing left to do
        self.parser = http.get_parser(self.cfg, self.sock, self.client)
        self.parser.unreader = _DeadlineUnreader(self.sock)

    def next_request(self, leftover: bytes) -> None:
        self.buf = bytearray(leftover)
        self.head_scan = 0
        self.body_start = -1
        self.length = None
        self.chunked = False
        self.chunk_scan = 0
        self.continue_sent = False
        self.complete = False


def _framing(head: bytes) -> tuple[int | None, bool, bool, bool]:
    """(Content-Length, chunked, expects 100-continue, understood) from a request head.
    Anything unusual is "not understood": the thread's parser then decides (and refuses)."""
    lengths: set[bytes] = set()
    codings: list[bytes] = []
    expect = False
    for line in head.split(b"\r\n")[1:]:
        name, sep, value = line.partition(b":")
        if not sep:
            return None, False, False, False
        name = name.strip().lower()
        value = value.strip()
        if name == b"content-length":
            lengths.add(value)
        elif name == b"transfer-encoding":
            codings += [c.strip().lower() for c in value.split(b",")]
        elif name == b"expect":
            expect = value.lower() == b"100-continue"
    version_ok = head.split(b"\r\n", 1)[0].endswith(b"HTTP/1.1")
    if codings:
        ok = not lengths and codings[-1] == b"chunked"
        return None, ok, expect and version_ok, ok
    if not lengths:
        return 0, False, False, True
    value = lengths.pop()
    if lengths or not value.isdigit():  # two different lengths, or not a number
        return None, False, False, False
    return int(value), False, expect and version_ok, True


def _chunked_end(buf: bytearray, pos: int) -> tuple[int, int | None]:
    """Walk chunk-size lines from `pos`: (where the walk stopped, end of the message or None).
    Raises ValueError on framing the parser would refuse."""
    while True:
        line_end = buf.find(b"\r\n", pos)
        if line_end < 0:
            if len(buf) - pos > 4096:
                raise ValueError("chunk-size line too long")
            return pos, None
        size = int(bytes(buf[pos:line_end]).split(b";", 1)[0].strip() or b"x", 16)
        if size == 0:
            # Trailer fields, then an empty line.
            if buf.startswith(b"\r\n", line_end + 2):
                return pos, line_end + 4
            end = buf.find(b"\r\n\r\n", line_end + 2)
            return pos, (end + 4 if end >= 0 else None)
        next_pos = line_end + 2 + size + 2
        if next_pos > len(buf):
            return pos, None
        pos = next_pos


class BalancedThreadWorker(ThreadWorker):  # type: ignore[misc]  # gunicorn ships no types
    in_flight = 0

    def init_process(self) -> None:
        settings = load_settings()
        self.deadlines = Deadlines(
            handshake=settings.tls_handshake_timeout_seconds,
            header=settings.request_header_timeout_seconds,
            body=settings.request_body_timeout_seconds,
            max_body=settings.max_request_bytes,
        )
        self.waiting: set[_Conn] = set()  # connections the event loop holds
        self.next_sweep = 0.0
        super().init_process()

    # --- accepting, and spreading connections over the workers ---------------------------

    def set_accept_enabled(self, enabled: bool) -> None:
        # The event loop asks for accepting whenever it has room for connections; only say
        # yes while a thread is free to take the next request.
        super().set_accept_enabled(enabled and self.in_flight < self.cfg.threads)

    def accept(self, listener: socket.socket) -> None:
        try:
            client, address = listener.accept()
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.ECONNABORTED, errno.EWOULDBLOCK):
                raise
            return
        self.nr_conns += 1
        conn = _Conn(self.cfg, client, address, listener.getsockname())
        now = time.monotonic()
        if self.cfg.is_ssl and self.tls_on(listener):
            try:
                conn.sock = gunicorn_sock.ssl_context(self.cfg).wrap_socket(
                    conn.sock,
                    server_side=True,
                    do_handshake_on_connect=False,
                    suppress_ragged_eofs=self.cfg.suppress_ragged_eofs,
                )
            except (OSError, ValueError):
                self._close(conn)
                return
            conn.state, conn.deadline = "handshake", now + self.deadlines.handshake
        else:
            conn.start_http()
            conn.deadline = now + self.deadlines.header
        self._wait(conn, selectors.EVENT_READ)

    def tls_on(self, listener: socket.socket) -> bool:
        """Whether connections on `listener` speak TLS (all of them, when certificates are
        configured; the results service's worker keeps a loopback listener plain)."""
        return True

    def enqueue_req(self, conn: Any) -> None:
        self.in_flight += 1
        if self.in_flight >= self.cfg.threads:
            super().set_accept_enabled(False)
        super().enqueue_req(conn)

    # --- the event loop's side: handshake, reading, discarding, deadlines ------------------

    def _wait(self, conn: _Conn, events: int) -> None:
        self.waiting.add(conn)
        if conn.events == events:
            return
        callback = partial(self._on_event, conn)
        if conn.events:
            self.poller.modify(conn.sock, events, callback)
        else:
            self.poller.register(conn.sock, events, callback)
        conn.events = events

    def _unwait(self, conn: _Conn) -> None:
        self.waiting.discard(conn)
        if conn.events:
            try:
                self.poller.unregister(conn.sock)
            except (KeyError, ValueError, OSError):
                pass
            conn.events = 0

    def _close(self, conn: _Conn) -> None:
        if conn.closed:
            return
        conn.closed = True
        self._unwait(conn)
        self.nr_conns -= 1
        util.close(conn.sock)

    def _on_event(self, conn: _Conn, _fileobj: Any = None) -> None:
        try:
            if conn.state == "closing":
                self._discard(conn)
                return
            if conn.state == "handshake":
                conn.sock.do_handshake()
                conn.start_http()
                conn.state, conn.deadline = "head", time.monotonic() + self.deadlines.header
            self._read(conn)
        except ssl.SSLWantReadError:
            self._wait(conn, selectors.EVENT_READ)
        except ssl.SSLWantWriteError:
            self._wait(conn, selectors.EVENT_WRITE)
        except (OSError, ValueError) as exc:  # TLS errors, resets, broken framing
            self.log.debug("closing connection from %s: %s", conn.client, exc)
            self._close(conn)

    def _read(self, conn: _Conn) -> None:
        while len(conn.buf) < self.deadlines.max_body + MAX_HEAD_BYTES:
            try:
                data = conn.sock.recv(RECV_BYTES)
            except (BlockingIOError, ssl.SSLWantReadError):
                break
            if not data:  # the client went away (between requests, the normal way to go)
                self._close(conn)
                return
            if conn.state == "idle":
                conn.state, conn.deadline = "head", time.monotonic() + self.deadlines.header
            conn.buf += data
        if self._request_ready(conn):
            self._hand_over(conn)
        else:
            self._wait(conn, selectors.EVENT_READ)

    def _request_ready(self, conn: _Conn) -> bool:
        """Whether a thread can take the connection now; moves it from head to body."""
        buf = conn.buf
        if conn.body_start < 0:
            end = buf.find(b"\r\n\r\n", conn.head_scan)
            if end < 0:
                conn.head_scan = max(0, len(buf) - 3)
                return len(buf) > MAX_HEAD_BYTES  # the parser answers 431
            conn.body_start = end + 4
            length, chunked, expect, understood = _framing(bytes(buf[:end]))
            if not understood:
                return True  # the parser refuses it with a 400
            conn.length, conn.chunked, conn.chunk_scan = length, chunked, conn.body_start
            conn.state, conn.deadline = "body", time.monotonic() + self.deadlines.body
            if length is not None and length > self.deadlines.max_body:
                return True  # the app answers 413 at once; the rest is discarded after
            if expect and len(buf) == conn.body_start:
                # The client waits for this before it sends the body (RFC 9110 10.1.1).
                conn.sock.send(b"HTTP/1.1 100 Continue\r\n\r\n")
                conn.continue_sent = True
        received = len(buf) - conn.body_start
        if conn.length is not None:
            conn.complete = received >= conn.length
            return conn.complete
        try:
            conn.chunk_scan, message_end = _chunked_end(buf, conn.chunk_scan)
        except ValueError:
            return True  # the parser refuses the framing
        conn.complete = message_end is not None
        return conn.complete or received > self.deadlines.max_body

    def _hand_over(self, conn: _Conn) -> None:
        self._unwait(conn)
        conn.sock.setblocking(True)
        conn.parser.unreader.unread(bytes(conn.buf))
        conn.parser.unreader.deadline = time.monotonic() + self.deadlines.body
        conn.sock.settimeout(self.deadlines.body)  # writing the answer, too, has an end
        conn.buf = bytearray()
        self.enqueue_req(conn)

    def _start_closing(self, conn: _Conn) -> None:
        """Half-close (RFC 9112 9.6) and discard what the client still sends until it closes,
        in the event loop: the client reads our answer instead of a reset, and no thread (nor
        the loop) blocks on it as gunicorn's own lingering close would."""
        try:
            conn.sock.setblocking(False)
            conn.sock.shutdown(socket.SHUT_WR)
        except OSError:
            self._close(conn)
            return
        conn.state, conn.deadline = "closing", time.monotonic() + self.deadlines.body
        self._wait(conn, selectors.EVENT_READ)

    def _discard(self, conn: _Conn) -> None:
        while conn.discarded <= 4 * self.deadlines.max_body:
            try:
                data = conn.sock.recv(RECV_BYTES)
            except (BlockingIOError, ssl.SSLWantReadError):
                return
            if not data:
                break
            conn.discarded += len(data)
        self._close(conn)

    def murder_pending(self) -> None:
        # Called on every turn of the event loop: close connections past their deadline.
        now = time.monotonic()
        if now < self.next_sweep:
            return
        self.next_sweep = now + SWEEP_SECONDS
        for conn in [c for c in self.waiting if c.deadline <= now]:
            if conn.state in ("head", "body"):
                # A request begun and not finished in time (a TCP probe or a scanner that
                # never starts TLS is only worth a debug line).
                self.log.info(
                    "closed a connection from %s: request %s not complete within its deadline",
                    conn.client[0] if isinstance(conn.client, tuple) else conn.client,
                    conn.state,
                )
            elif conn.state == "handshake":
                self.log.debug("closed a connection from %s: no TLS handshake in time",
                               conn.client)
            self._close(conn)

    def murder_keepalived(self, force: bool = False) -> None:
        # Kept-alive connections wait among the others (murder_pending); at the very end of a
        # graceful stop everything still open is closed.
        if force:
            for conn in list(self.waiting):
                self._close(conn)

    def _cap_keepalive(self, deadline: float) -> None:
        for conn in self.waiting:
            if conn.state == "idle":
                conn.deadline = min(conn.deadline, deadline)

    # --- the thread's side -------------------------------------------------------------

    def handle(self, conn: _Conn) -> bool:
        req = None
        try:
            req = next(conn.parser)
            if not req:
                return False
            if conn.continue_sent:
                req._expected_100_continue = False  # noqa: SLF001 - sent by the event loop
            if not conn.complete:
                # The rest of the body is discarded after the answer: the answer says the
                # connection closes (Connection: close).
                req.must_close = True
            keepalive = self.handle_request(req, conn)
            # A body the app refused unread is discarded by the event loop, not by a thread.
            return bool(keepalive and conn.complete and conn.parser.finish_body(
                deadline=time.monotonic() + self.deadlines.body))
        except TimeoutError:
            self.log.info("closed a connection from %s: request body too slow", conn.client)
        except (NoMoreData, StopIteration) as exc:
            self.log.debug("closing connection: %s", exc)
        except ssl.SSLError as exc:
            self.log.debug("TLS error: %s", exc)
        except OSError as exc:
            if exc.errno not in (errno.EPIPE, errno.ECONNRESET, errno.ENOTCONN):
                self.log.warning("socket error on a connection from %s: %s", conn.client, exc)
        except Exception as exc:  # noqa: BLE001 - gunicorn answers 400/500 and logs
            self.handle_error(req, conn.sock, conn.client, exc)
        return False

    def finish_request(self, conn: _Conn, fs: Any) -> None:
        self.in_flight -= 1  # the event loop re-enables accepting on its next turn
        try:
            keepalive = bool(fs.result()) if not fs.cancelled() else False
        except Exception:  # noqa: BLE001 - handle() catches; a cancelled pool raises here
            keepalive = False
        if conn.closed:
            return
        if not keepalive:
            self._start_closing(conn)
            return
        try:
            conn.sock.setblocking(False)
        except OSError:
            self._close(conn)
            return
        conn.next_request(conn.parser.unreader.take_buffered())
        linger = self.cfg.keepalive if self.alive else STOP_KEEPALIVE_LINGER
        conn.state, conn.deadline = "idle", time.monotonic() + linger
        if conn.buf or (isinstance(conn.sock, ssl.SSLSocket) and conn.sock.pending()):
            # The next request is already here (pipelined, or read ahead by TLS).
            conn.state = "head"
            self._on_event(conn)
        else:
            self._wait(conn, selectors.EVENT_READ)


class PlainLoopbackWorker(BalancedThreadWorker):
    """The results service's worker: TLS on its Service port, plain HTTP on the loopback
    listener named by SIDECAR_DEBUG_RESULTS_PLAIN_BIND (HOST:PORT), which only a process in the
    pod's network namespace can reach: `kubectl port-forward` (the kubelet connects there from
    inside the pod's namespace), never another pod."""

    def tls_on(self, listener: socket.socket) -> bool:
        plain = os.environ.get(PLAIN_BIND_ENV, "")
        host, _, port = plain.rpartition(":")
        address = listener.getsockname()
        return not (plain and isinstance(address, tuple) and str(address[1]) == port
                    and address[0] == host)
