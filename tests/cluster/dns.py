"""A tiny cluster DNS for the one-node cluster: `<service>.<namespace>.svc.<domain>` -> ClusterIP.

No CoreDNS package is reachable here, and pods (helm test hooks, clients) resolve Services by
name. This answers A queries for Services from the apiserver (polled on a cache miss, at most
once a second) and NXDOMAIN for everything else, so resolvers never wait for a timeout.

Run: python -m tests.cluster.dns --listen 10.244.0.1:53 --server URL --token T --ca FILE
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import socket
import ssl
import struct
import time
import urllib.request


class ServiceTable:
    def __init__(self, server: str, token: str, ca_file: str, domain: str) -> None:
        self._url = server.rstrip("/") + "/api/v1/services"
        self._token = token
        self._context = ssl.create_default_context(cafile=ca_file)
        self._suffix = f".svc.{domain}"
        self._records: dict[str, str] = {}
        self._loaded_at = 0.0

    def _refresh(self) -> None:
        request = urllib.request.Request(  # noqa: S310 - the URL is the test apiserver
            self._url, headers={"Authorization": f"Bearer {self._token}"}
        )
        with urllib.request.urlopen(request, context=self._context, timeout=3) as response:  # noqa: S310
            services = json.load(response)["items"]
        records = {}
        for service in services:
            cluster_ip = service["spec"].get("clusterIP")
            if cluster_ip and cluster_ip != "None":
                meta = service["metadata"]
                records[f"{meta['name']}.{meta['namespace']}{self._suffix}"] = cluster_ip
        self._records = records
        self._loaded_at = time.monotonic()

    def lookup(self, name: str) -> str | None:
        name = name.lower().rstrip(".")
        if not name.endswith(self._suffix):
            return None
        if name not in self._records and time.monotonic() - self._loaded_at > 1.0:
            try:
                self._refresh()
            except OSError:
                pass
        return self._records.get(name)


def _parse_question(packet: bytes) -> tuple[str, int, int]:
    labels, offset = [], 12
    while packet[offset]:
        length = packet[offset]
        labels.append(packet[offset + 1 : offset + 1 + length].decode("ascii", "replace"))
        offset += 1 + length
    qtype, _qclass = struct.unpack("!HH", packet[offset + 1 : offset + 5])
    return ".".join(labels), qtype, offset + 5


def answer(packet: bytes, table: ServiceTable) -> bytes:
    (ident, flags) = struct.unpack("!HH", packet[:4])
    name, qtype, end = _parse_question(packet)
    question = packet[12:end]
    address = table.lookup(name)
    rcode = 0 if address else 3  # NOERROR / NXDOMAIN
    records = b""
    if address and qtype == 1:  # A
        records = (
            b"\xc0\x0c" + struct.pack("!HHIH", 1, 1, 5, 4) + ipaddress.IPv4Address(address).packed
        )
    header = struct.pack(
        "!HHHHHH", ident, 0x8000 | (flags & 0x0100) | 0x0400 | rcode, 1, 1 if records else 0, 0, 0
    )
    return header + question + records


def serve(listen: str, table: ServiceTable) -> None:
    host, port = listen.rsplit(":", 1)
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, int(port)))
    while True:
        packet, peer = sock.recvfrom(4096)
        try:
            sock.sendto(answer(packet, table), peer)
        except (IndexError, struct.error, UnicodeError):
            continue


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--listen", required=True)
    parser.add_argument("--server", required=True)
    parser.add_argument("--token", required=True)
    parser.add_argument("--ca", required=True)
    parser.add_argument("--domain", default="cluster.local")
    args = parser.parse_args()
    serve(args.listen, ServiceTable(args.server, args.token, args.ca, args.domain))


if __name__ == "__main__":
    main()
