"""A local stand-in for an OpenTelemetry Collector's OTLP/gRPC receiver: a real gRPC server in
the test process that serves the profiles service through the official bindings' own stubs
(`profiles_service_pb2_grpc.add_ProfilesServiceServicer_to_server`, so the method path and the
request's decoding are theirs, as the Collector's receiver registers the same service), records
every request with its metadata, and answers from a script: a reply (with a partial success),
a gRPC status, or silence for a while. Plaintext, or TLS with a certificate from a CA the test
makes (webhook.certs.pki)."""

from __future__ import annotations

import ssl
import threading
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from opentelemetry.proto.collector.profiles.v1development import profiles_service_pb2_grpc
from opentelemetry.proto.collector.profiles.v1development.profiles_service_pb2 import (
    ExportProfilesPartialSuccess,
    ExportProfilesServiceRequest,
    ExportProfilesServiceResponse,
)

from tests.cluster.pki import _client_certificate as client_certificate
from tests.unit.results.fake_sinks import wait_for_requests
from webhook.certs import pki


@dataclass
class GrpcReceived:
    metadata: dict[str, str]
    body: bytes  # the request as received, serialized again for the shape checks


@dataclass
class Reply:
    """`code` (None: OK) with `details`; an OK reply's partial success; `delay` seconds of
    silence first."""

    code: grpc.StatusCode | None = None
    details: str = ""
    rejected: int = 0
    message: str = ""
    delay: float = 0.0


@dataclass
class Tls:
    """The collector's certificate from a CA of the test's; with `clients`, mutual TLS: a
    client must present a certificate that CA signed."""

    ca: pki.KeyPair = field(default_factory=pki.generate_ca)
    names: tuple[str, ...] = ("localhost", "127.0.0.1")
    clients: pki.KeyPair | None = None

    def __post_init__(self) -> None:
        self.serving = pki.generate_serving(self.ca, list(self.names))

    def client(self) -> pki.KeyPair:
        """A client certificate the `clients` CA signed."""
        assert self.clients is not None
        return client_certificate(self.clients, "sidecar-debug-results", "sidecar-debug")

    def server_context(self, directory: Path) -> ssl.SSLContext:
        """The same as an ssl server context (for the HTTP stand-in)."""
        cert, key = directory / "collector.crt", directory / "collector.key"
        cert.write_bytes(self.serving.cert_pem)
        key.write_bytes(self.serving.key_pem)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        if self.clients is not None:
            context.verify_mode = ssl.CERT_REQUIRED
            context.load_verify_locations(cadata=self.clients.cert_pem.decode())
        return context


class GrpcCollector:
    """Answers from `script` in order, then `then` for every later request."""

    def __init__(self, script: list[Reply] | None = None, then: Reply | None = None,
                 tls: Tls | None = None, max_receive: int = 4 << 20) -> None:
        self.script = list(script or [])
        self.then = then or Reply()
        self.received: list[GrpcReceived] = []
        self.arrived = threading.Condition()
        self.release = threading.Event()
        self.tls = tls
        collector = self

        class Servicer(profiles_service_pb2_grpc.ProfilesServiceServicer):
            def Export(self, request: ExportProfilesServiceRequest,  # noqa: N802
                       context: Any) -> ExportProfilesServiceResponse:
                with collector.arrived:
                    collector.received.append(GrpcReceived(
                        {key: str(value) for key, value in context.invocation_metadata()},
                        request.SerializeToString()))
                    reply = collector.script.pop(0) if collector.script else collector.then
                    collector.arrived.notify_all()
                if reply.delay:
                    collector.release.wait(reply.delay)
                if reply.code is not None:
                    context.abort(reply.code, reply.details)
                return ExportProfilesServiceResponse(partial_success=ExportProfilesPartialSuccess(
                    rejected_profiles=reply.rejected, error_message=reply.message))

        # 4 MiB: the Collector's default max_recv_msg_size_mib, and gRPC's.
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4),
                                  options=[("grpc.max_receive_message_length", max_receive)])
        # Untyped in some releases of the bindings (1.45.2's _grpc module has no annotations).
        register: Callable[[Any, grpc.Server], None] = (
            profiles_service_pb2_grpc.add_ProfilesServiceServicer_to_server)
        register(Servicer(), self.server)
        if tls is None:
            self.port = self.server.add_insecure_port("127.0.0.1:0")
        else:
            credentials = grpc.ssl_server_credentials(
                [(tls.serving.key_pem, tls.serving.cert_pem)],
                root_certificates=tls.clients.cert_pem if tls.clients else None,
                require_client_auth=tls.clients is not None)
            self.port = self.server.add_secure_port("127.0.0.1:0", credentials)

    @property
    def url(self) -> str:
        if self.tls is None:
            return f"http://127.0.0.1:{self.port}"
        return f"https://localhost:{self.port}"

    def __enter__(self) -> GrpcCollector:
        self.server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        self.server.stop(grace=None).wait(5)

    def wait_for(self, count: int, timeout: float = 20.0) -> list[GrpcReceived]:
        return wait_for_requests(self.arrived, self.received, count, timeout)


def decode(body: bytes) -> ExportProfilesServiceRequest:
    """What the Collector's OTLP receiver does with the body, plus the proto's documented
    invariants, so a request a real receiver would reject fails here."""
    request = ExportProfilesServiceRequest.FromString(body)
    table = request.dictionary
    assert table.string_table[0] == ""
    for name in ("mapping_table", "location_table", "function_table", "link_table",
                 "attribute_table", "stack_table"):
        first = getattr(table, name)[0]
        assert first == type(first)(), f"{name}[0] is not the zero value"
    for stack in table.stack_table:
        assert all(0 < i < len(table.location_table) for i in stack.location_indices)
    for location in table.location_table[1:]:
        assert location.mapping_index == 0
        assert all(0 < line.function_index < len(table.function_table) for line in location.lines)
    for function in table.function_table[1:]:
        assert 0 < function.name_strindex < len(table.string_table)
    for resource in request.resource_profiles:
        for scope in resource.scope_profiles:
            for profile in scope.profiles:
                for sample in profile.samples:
                    assert 0 < sample.stack_index < len(table.stack_table)
                assert all(0 < i < len(table.attribute_table) for i in profile.attribute_indices)
    return request


def folded_of(request: ExportProfilesServiceRequest, per_sample: int) -> dict[tuple[str, ...], int]:
    table = request.dictionary
    [profile] = request.resource_profiles[0].scope_profiles[0].profiles
    stacks: dict[tuple[str, ...], int] = {}
    for sample in profile.samples:
        frames = []
        for index in table.stack_table[sample.stack_index].location_indices:
            [line] = table.location_table[index].lines
            frames.append(table.string_table[table.function_table[line.function_index]
                                             .name_strindex])
        [value] = sample.values
        key = tuple(reversed(frames))  # leaf first in OTLP, root first in folded
        stacks[key] = stacks.get(key, 0) + value // per_sample
    return stacks
