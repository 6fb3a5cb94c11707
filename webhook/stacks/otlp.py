"""Folded stacks as an OpenTelemetry profiles export request (OTLP `v1development`, built with
the official bindings of the `opentelemetry-proto` package, 1.45 carrying the protos' v1.10
shape: one `ProfilesDictionary` per request, a `stack_table`, one sample type per profile;
the profiles development version 1 of the proto's versioning rule). An encoder only: what the
collector answers, and how the request travels, is webhook.results.export's (collector.py).

Pure: no I/O, no clock. The dictionary's tables start with their zero value, as the proto asks
("mapping_table[0] must always be zero value", the same for every table); each distinct frame
name is one function and one location (no addresses: the toolset names frames itself), and
each distinct stack one `Stack`, leaf first. A CPU recording at F Hz is `samples`/`count` with
the period `cpu`/`nanoseconds` 1e9/F, as OpenTelemetry's eBPF profiler sends it and as
Grafana Pyroscope's OTLP receiver files a `process_cpu` profile (its
pkg/ingester/otlp/convert.go matches `samples:count:cpu:nanoseconds`); a weighted recording
(off-CPU, wall) keeps its kind with its values in nanoseconds and no period (Pyroscope's
`off_cpu:nanoseconds::`). The run's pprof, of the same sample type, is attached as the
profile's original payload.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from opentelemetry.proto.collector.profiles.v1development.profiles_service_pb2 import (
    ExportProfilesServiceRequest,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, InstrumentationScope, KeyValue
from opentelemetry.proto.profiles.v1development.profiles_pb2 import (
    Function,
    KeyValueAndUnit,
    Line,
    Location,
    Profile,
    ProfilesDictionary,
    ResourceProfiles,
    Sample,
    ScopeProfiles,
    Stack,
    ValueType,
)
from opentelemetry.proto.profiles.v1development.profiles_pb2 import (
    Mapping as ProfileMapping,
)
from opentelemetry.proto.resource.v1.resource_pb2 import Resource

SCOPE_NAME = "sidecar-debug"
PROTO_VERSION = "v1.10.0"  # the opentelemetry-proto shape the bindings carry (see the doc)
# The profiles development version of that shape (opentelemetry-proto's docs/specification.md,
# "Profiles development version"): sent on both transports (collector.py names the header and
# the metadata), so that a version-aware collector compiled for a later, incompatible shape
# refuses the request (HTTP 400, INVALID_ARGUMENT) instead of decoding it wrongly. Its absence
# would mean 1 as well.
DEVELOPMENT_VERSION = "1"
# Units a recording may be weighted in (the toolset's meta.json `unit`), as nanoseconds each.
TIME_UNITS = {"nanoseconds": 1, "microseconds": 1_000, "milliseconds": 1_000_000,
               "seconds": 1_000_000_000}


@dataclass(frozen=True)
class Recording:
    """What the request says of the run besides its stacks."""

    resource: Mapping[str, str]  # k8s.namespace.name, k8s.pod.name, ..., service.name
    attributes: Mapping[str, str]  # the profile's own (technique, schedule, run)
    profile_id: bytes  # 16 bytes
    time_ns: int
    duration_ns: int
    frequency: int  # Hz; 0: a weighted recording, not sampled at a frequency
    unit: str = "count"  # of the stacks' values: count (samples) or a time unit
    sample_kind: str = "cpu"
    original_pprof: bytes = b""


def profile_id(run_id: str) -> bytes:
    """A stable 16-byte id per stored run (the same run exported twice is the same profile)."""
    return hashlib.sha256(run_id.encode("utf-8", "surrogatepass")).digest()[:16]


def sample_type(recording: Recording) -> tuple[str, str, int]:
    """(type, unit, nanoseconds per stack value; 0 when the values are counts of samples)."""
    if recording.unit in TIME_UNITS:
        return recording.sample_kind, "nanoseconds", TIME_UNITS[recording.unit]
    return "samples", "count", 0


def period_ns(recording: Recording) -> int:
    """The time one sample stands for (0: a weighted recording, or no frequency known)."""
    if recording.unit in TIME_UNITS or recording.frequency <= 0:
        return 0
    return 1_000_000_000 // recording.frequency


def export_request(stacks: Mapping[tuple[str, ...], int | float],
                   recording: Recording) -> ExportProfilesServiceRequest:
    strings: dict[str, int] = {"": 0}

    def string(text: str) -> int:
        index = strings.get(text)
        if index is None:
            index = strings[text] = len(strings)
        return index

    kind, unit, scale = sample_type(recording)
    functions: dict[str, int] = {}
    stack_ids: dict[tuple[int, ...], int] = {}
    dictionary = ProfilesDictionary()
    dictionary.mapping_table.append(ProfileMapping())
    dictionary.location_table.append(Location())
    dictionary.function_table.append(Function())
    dictionary.link_table.add()
    dictionary.attribute_table.append(KeyValueAndUnit())
    dictionary.stack_table.append(Stack())

    def location(frame: str) -> int:
        index = functions.get(frame)
        if index is None:
            index = functions[frame] = len(dictionary.function_table)
            dictionary.function_table.append(Function(name_strindex=string(frame)))
            dictionary.location_table.append(Location(lines=[Line(function_index=index)]))
        return index  # function i is described by location i: both tables grow together

    profile = Profile(
        sample_type=ValueType(type_strindex=string(kind), unit_strindex=string(unit)),
        time_unix_nano=recording.time_ns, duration_nano=recording.duration_ns,
        profile_id=recording.profile_id,
        original_payload_format="pprof" if recording.original_pprof else "",
        original_payload=recording.original_pprof)
    period = period_ns(recording)
    if period:
        profile.period_type.CopyFrom(ValueType(type_strindex=string(recording.sample_kind),
                                               unit_strindex=string("nanoseconds")))
        profile.period = period
    for stack, value in sorted(stacks.items(), key=lambda item: (-item[1], item[0])):
        amount = round(value * scale) if scale else round(value)
        if amount <= 0:
            continue
        key = tuple(location(frame) for frame in reversed(stack))  # leaf first
        index = stack_ids.get(key)
        if index is None:
            index = stack_ids[key] = len(dictionary.stack_table)
            dictionary.stack_table.append(Stack(location_indices=key))
        profile.samples.append(Sample(stack_index=index, values=[amount]))
    for key_text, value_text in sorted(recording.attributes.items()):
        profile.attribute_indices.append(len(dictionary.attribute_table))
        dictionary.attribute_table.append(KeyValueAndUnit(
            key_strindex=string(key_text), value=AnyValue(string_value=value_text)))
    dictionary.string_table.extend(strings)  # insertion order is index order
    return ExportProfilesServiceRequest(
        resource_profiles=[ResourceProfiles(
            resource=Resource(attributes=_key_values(sorted(recording.resource.items()))),
            scope_profiles=[ScopeProfiles(scope=InstrumentationScope(name=SCOPE_NAME),
                                          profiles=[profile])])],
        dictionary=dictionary)


def _key_values(items: Sequence[tuple[str, str]]) -> list[KeyValue]:
    return [KeyValue(key=key, value=AnyValue(string_value=value)) for key, value in items]
