"""Slow clients (issue 12, item 6): connections that hold a server's attention without ever
completing a request, the way a slowloris attack does, kept open while reviews are measured.

Four kinds, in turn: `silent` (TCP connect, then nothing), `tls-stall` (TLS handshake, then
nothing), `header-drip` (a request head one byte at a time, never finished) and `body-drip`
(a complete head announcing a body that then comes one byte at a time). SlowClients keeps
`count` of them open from one thread, notes how long each lived before the server closed it,
and (with `reopen`) replaces every closed one at once, as an attacker would.

Used by `python -m bench --sections slow-clients` (docs/performance.md) and by
tests/unit/server/test_slow_clients.py.
"""

from __future__ import annotations

import select
import socket
import ssl
import threading
import time
from dataclasses import dataclass, field

KINDS = ("silent", "tls-stall", "header-drip", "body-drip")
HEAD = b"POST /mutate HTTP/1.1\r\nHost: webhook\r\nContent-Type: application/json\r\n"
HEADER_DRIP = HEAD + b"X-Slow: "
BODY_HEAD = HEAD + b"Content-Length: 100000\r\n\r\n"


@dataclass
class SlowConnection:
    kind: str
    sock: socket.socket
    opened: float
    sent: int = 0


@dataclass
class Closed:
    kind: str
    lifetime_s: float  # from connect to the server closing it


def _client_context() -> ssl.SSLContext:
    # Loopback to a test server with a throw-away certificate.
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


@dataclass
class SlowClients:
    host: str
    port: int
    count: int
    drip_interval_s: float = 0.2
    reopen: bool = False
    connect_timeout_s: float = 10.0
    open_conns: list[SlowConnection] = field(default_factory=list)
    closed: list[Closed] = field(default_factory=list)
    opened_total: int = 0
    errors: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._context = _client_context()
        self._thread = threading.Thread(target=self._run, name="slow-clients", daemon=True)

    def __enter__(self) -> SlowClients:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)
        for conn in self.open_conns:
            conn.sock.close()

    def wait_all_open(self, timeout_s: float = 60) -> None:
        """Until `count` connections were opened (and, unless they reopen, still are)."""
        deadline = time.monotonic() + timeout_s
        while self.opened_total < self.count:
            if time.monotonic() > deadline:
                raise TimeoutError(f"only {self.opened_total} of {self.count} slow clients "
                                   f"connected: {self.errors[-3:]}")
            time.sleep(0.05)

    def wait_all_closed(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self._lock:
                if not self.open_conns and self.opened_total >= self.count:
                    return True
            time.sleep(0.1)
        return False

    def _open(self, kind: str) -> SlowConnection:
        raw = socket.create_connection((self.host, self.port), timeout=self.connect_timeout_s)
        opened = time.monotonic()
        if kind == "silent":
            return SlowConnection(kind, raw, opened)
        sock = self._context.wrap_socket(raw)  # the handshake, within connect_timeout_s
        if kind == "body-drip":
            sock.sendall(BODY_HEAD)
        return SlowConnection(kind, sock, opened)

    def _drip(self, conn: SlowConnection) -> None:
        if conn.kind == "header-drip":
            data = HEADER_DRIP[conn.sent:conn.sent + 1] or b"a"
        elif conn.kind == "body-drip":
            data = b"["
        else:
            return
        conn.sock.send(data)
        conn.sent += 1

    def _run(self) -> None:
        next_kind = 0
        while not self._stop.is_set():
            wanted = self.count - len(self.open_conns)
            if not self.reopen:
                wanted = min(wanted, self.count - self.opened_total)
            for _ in range(max(0, wanted)):
                kind = KINDS[next_kind % len(KINDS)]
                next_kind += 1
                try:
                    conn = self._open(kind)
                except OSError as exc:
                    self.errors.append(f"{kind}: {exc}")
                    continue
                with self._lock:
                    self.open_conns.append(conn)
                    self.opened_total += 1
            readable: list[socket.socket] = []
            if self.open_conns:
                try:
                    readable, _, _ = select.select(
                        [c.sock for c in self.open_conns], [], [], self.drip_interval_s)
                except (OSError, ValueError):  # closed under us by __exit__
                    return
            else:
                time.sleep(self.drip_interval_s)
            gone = {id(s) for s in readable if self._server_closed(s)}
            for conn in list(self.open_conns):
                if id(conn.sock) not in gone:
                    try:
                        self._drip(conn)
                        continue
                    except OSError:
                        pass  # closed by the server while we were sending
                self._forget(conn)

    @staticmethod
    def _server_closed(sock: socket.socket) -> bool:
        try:
            sock.setblocking(False)
            return sock.recv(4096) == b""  # any answer (a 4xx) is not a close yet
        except (ssl.SSLWantReadError, BlockingIOError):
            return False
        except OSError:  # a reset or a TLS alert: closed, too
            return True
        finally:
            try:
                sock.setblocking(True)
                sock.settimeout(1.0)
            except OSError:
                pass

    def _forget(self, conn: SlowConnection) -> None:
        with self._lock:
            self.open_conns.remove(conn)
            self.closed.append(Closed(conn.kind, round(time.monotonic() - conn.opened, 2)))
        conn.sock.close()
