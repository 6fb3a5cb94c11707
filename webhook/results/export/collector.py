"""What an OpenTelemetry collector's profiles protocol asks of an export besides the request's
bytes (webhook.stacks.otlp encodes those): the header (OTLP/HTTP) or call metadata (OTLP/gRPC)
that carries the profiles development version, the gRPC method, and what the collector's
answer says.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from dataclasses import dataclass

from google.protobuf.empty_pb2 import Empty
from google.protobuf.message import DecodeError
from google.protobuf.unknown_fields import UnknownFieldSet
from opentelemetry.proto.collector.profiles.v1development import profiles_service_pb2
from opentelemetry.proto.collector.profiles.v1development.profiles_service_pb2 import (
    ExportProfilesServiceResponse,
)

# Where webhook.stacks.otlp.DEVELOPMENT_VERSION goes, on each transport.
HTTP_VERSION_HEADER = "OTLP-Profiles-Development-Version"
GRPC_VERSION_METADATA = "otlp-profiles-development-version"
# `/opentelemetry.proto.collector.profiles.v1development.ProfilesService/Export`, from the
# bindings' own service descriptor.
_EXPORT = profiles_service_pb2.DESCRIPTOR.services_by_name["ProfilesService"] \
    .methods_by_name["Export"]
GRPC_METHOD = f"/{_EXPORT.containing_service.full_name}/{_EXPORT.name}"


@dataclass(frozen=True)
class Outcome:
    """What an OTLP success answer says: `rejected` profiles and the collector's message (a
    partial success; rejected 0 with a message is a warning)."""

    rejected: int = 0
    message: str = ""


def export_outcome(body: bytes) -> Outcome:
    """The ExportProfilesServiceResponse of a success (HTTP 200 body, gRPC reply).
    ValueError: not one."""
    try:
        response = ExportProfilesServiceResponse.FromString(body)
    except DecodeError as error:
        raise ValueError(f"not an ExportProfilesServiceResponse ({error})") from error
    partial = response.partial_success
    return Outcome(max(0, partial.rejected_profiles), partial.error_message)


def status_message(body: bytes) -> str | None:
    """The `message` (field 2) of a google.rpc.Status, the body of an OTLP/HTTP error in
    protobuf; None when the body is not one. Read through protobuf's unknown fields: the
    Status message is not among the bindings."""
    try:
        fields = UnknownFieldSet(Empty.FromString(body))
    except (DecodeError, ValueError):
        return None
    for index in range(len(fields)):
        item = fields[index]
        if item.field_number == 2 and isinstance(item.data, bytes):
            return item.data.decode("utf-8", errors="replace")
    return None
