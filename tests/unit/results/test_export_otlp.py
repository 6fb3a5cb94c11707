"""Export of stored runs as OpenTelemetry profiles (OTLP/HTTP, `v1development`), against a local
stand-in for an OpenTelemetry Collector's OTLP receiver: it decodes every request with the
official bindings (`opentelemetry-proto`), as the Collector's receiver does, and checks what the
proto documents (tables start with their zero value, every index in range). The attached pprof is
decoded by Go's own pprof."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.profiles.v1development.profiles_service_pb2 import (
    ExportProfilesServiceRequest,
    ExportProfilesServiceResponse,
)

from tests.unit.results.fake_sinks import Answer, FakeSink, go_pprof_raw, running
from tests.unit.results.test_export import STACKS, STARTED, Make, make, secret  # noqa: F401
from webhook.results import folded
from webhook.results.export import ExportSettings, ExportSettingsError
from webhook.results.store import Run, Store

META = {"container": "debug-toolset", "schedule": "namespace/shop#0", "duration": 30,
        "frequency": 99, "appContainer": "app", "serviceName": "web"}
OK = Answer(body=ExportProfilesServiceResponse().SerializeToString(),
            headers={"Content-Type": "application/x-protobuf"})


@pytest.fixture
def run(tmp_path: Path) -> Run:
    return Store(tmp_path / "results").save("shop", "web-1", "perf", STACKS, started=STARTED,
                                             meta=META)


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


def attributes(request: ExportProfilesServiceRequest, indices: Any) -> dict[str, str]:
    table = request.dictionary
    return {table.string_table[table.attribute_table[i].key_strindex]:
            table.attribute_table[i].value.string_value for i in indices}


@pytest.fixture
def collector() -> Iterator[FakeSink]:
    with running(FakeSink(then=OK)) as sink:
        yield sink


def test_otlp_http_request_shape(tmp_path: Path, run: Run, make: Make,  # noqa: F811
                                 collector: FakeSink) -> None:
    secrets = secret(tmp_path, "otlp", token="otel-t0ken", tenant="team-a")
    made = make({"otlp": {"url": collector.url, "existingSecret": "otel",
                          "resourceAttributes": {"deployment.environment.name": "prod"}}},
                secrets)
    made.export(run)
    [received] = collector.wait_for(1)
    assert (received.method, received.path, received.query) == (
        "POST", "/v1development/profiles", {})
    assert received.headers["content-type"] == "application/x-protobuf"
    assert received.headers["authorization"] == "Bearer otel-t0ken"
    assert received.headers["x-scope-orgid"] == "team-a"
    request = decode(received.body)
    [resource] = request.resource_profiles
    assert {a.key: a.value.string_value for a in resource.resource.attributes} == {
        "k8s.namespace.name": "shop", "k8s.pod.name": "web-1", "k8s.container.name": "app",
        "service.name": "web", "deployment.environment.name": "prod"}
    [scope] = resource.scope_profiles
    assert scope.scope.name == "sidecar-debug"
    [profile] = scope.profiles
    strings = request.dictionary.string_table
    period = 1_000_000_000 // 99
    assert (strings[profile.sample_type.type_strindex],
            strings[profile.sample_type.unit_strindex]) == ("cpu", "nanoseconds")
    assert (strings[profile.period_type.type_strindex],
            strings[profile.period_type.unit_strindex], profile.period) == (
        "cpu", "nanoseconds", period)
    assert profile.time_unix_nano == int(STARTED.timestamp()) * 1_000_000_000
    assert profile.duration_nano == 30 * 1_000_000_000
    assert len(profile.profile_id) == 16 and any(profile.profile_id)
    assert folded_of(request, period) == STACKS  # every sample, names as recorded
    assert attributes(request, profile.attribute_indices) == {
        "sidecar_debug.technique": "perf", "sidecar_debug.schedule": "namespace/shop#0",
        "sidecar_debug.run": run.id}
    assert profile.original_payload_format == "pprof"
    assert go_pprof_raw(profile.original_payload, tmp_path).stacks == STACKS


def test_a_weighted_recording_keeps_its_unit_as_nanoseconds(tmp_path: Path, make: Make,  # noqa: F811
                                                            collector: FakeSink) -> None:
    offcpu = folded.parse("app;main;read 1500\napp;main;poll 250\n")  # microseconds blocked
    weighted = Store(tmp_path).save("shop", "web-1", "perf", offcpu, started=STARTED,
                                    meta={"type": "offcpu", "unit": "microseconds",
                                          "duration": 5})
    make({"otlp": {"url": collector.url}}).export(weighted)
    [received] = collector.wait_for(1)
    request = decode(received.body)
    [profile] = request.resource_profiles[0].scope_profiles[0].profiles
    strings = request.dictionary.string_table
    assert (strings[profile.sample_type.type_strindex],
            strings[profile.sample_type.unit_strindex]) == ("off_cpu", "nanoseconds")
    assert profile.period == 0 and not profile.HasField("period_type")
    assert folded_of(request, 1000) == offcpu
    assert profile.original_payload == b""  # our pprof is samples/count: not this profile
    assert {a.key for a in request.resource_profiles[0].resource.attributes} == {
        "k8s.namespace.name", "k8s.pod.name"}  # no app label, no single app container known


def test_symbol_text_is_carried_as_data(tmp_path: Path, make: Make,  # noqa: F811
                                        collector: FakeSink) -> None:
    hostile = {("app", "<script>alert(1)</script>", "a b\u202e", "\x00"): 3}
    stored = Store(tmp_path).save("shop", "web-1", "perf", hostile, started=STARTED,
                                  meta={"frequency": 100})
    make({"otlp": {"url": collector.url}}).export(stored)
    [received] = collector.wait_for(1)
    assert folded_of(decode(received.body), 10_000_000) == hostile


@pytest.mark.parametrize(("raw", "where"), [
    ({"otlp": {"url": "grpc://collector:4317"}}, "results.export.otlp.url"),
    ({"otlp": {"url": "http://c:4318", "protocol": "grpc"}}, "results.export.otlp.protocol"),
    ({"otlp": {"url": "http://c:4318", "resourceAttributes": {"k8s.pod.name": "x"}}},
     "results.export.otlp.resourceAttributes"),
    ({"otlp": {"url": "http://c:4318", "resourceAttributes": {"a b": "x"}}},
     "results.export.otlp.resourceAttributes"),
    ({"otlp": {"url": "http://c:4318", "labels": {"a": "x"}}}, "results.export.otlp"),
])
def test_bad_otlp_settings_name_the_value(raw: Any, where: str) -> None:
    with pytest.raises(ExportSettingsError) as error:
        ExportSettings.from_mapping(raw)
    assert str(error.value).startswith(f"{where}:"), error.value


def test_otlp_settings_defaults() -> None:
    [sink] = ExportSettings.from_mapping({"otlp": {"url": "http://c:4318"}}).sinks
    assert (sink.kind, sink.name, dict(sink.labels), sink.secret_dir) == (
        "otlp", "http/protobuf", {}, None)


def test_a_refused_request_is_not_retried(run: Run, make: Make) -> None:  # noqa: F811
    with running(FakeSink(then=Answer(status=400, body=b"bad profile"))) as sink:
        made = make({"otlp": {"url": sink.url}, "attempts": 3})
        made.export(run)
        sink.wait_for(1)
        made.close(5)
        assert len(sink.received) == 1


def test_the_service_names_the_app_for_exports() -> None:
    from webhook.results.service import app_identity

    pod = {"metadata": {"labels": {"app.kubernetes.io/name": "books", "app": "other"}},
           "spec": {"containers": [{"name": "debug-toolset"}, {"name": "books"}]}}
    assert app_identity(pod, "debug-toolset") == {"serviceName": "books",
                                                  "appContainer": "books"}
    two = {"metadata": {"labels": {"app": "web"}},
           "spec": {"containers": [{"name": "a"}, {"name": "b"}, {"name": "debug-toolset"}]}}
    assert app_identity(two, "debug-toolset") == {"serviceName": "web"}
    assert app_identity({"metadata": {}, "spec": {"containers": "junk"}}, "x") == {}
