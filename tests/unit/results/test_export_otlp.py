"""Export of stored runs as OpenTelemetry profiles (OTLP `v1development` over HTTP and gRPC),
against local stand-ins for an OpenTelemetry Collector's OTLP receiver (an HTTP server here, a
gRPC server serving the official stubs in fake_collector.py): every request is decoded with the
official bindings (`opentelemetry-proto`), as the Collector's receiver does, and checked for what
the proto documents (tables start with their zero value, every index in range) and every field
the export promises. The attached pprof is decoded by Go's own pprof. Failures (unreachable,
UNAVAILABLE, a certificate from another CA, a deadline, a partial success) are counted and
never stop the exporter or the other sinks."""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc
import pytest
from opentelemetry.proto.collector.profiles.v1development.profiles_service_pb2 import (
    ExportProfilesPartialSuccess,
    ExportProfilesServiceRequest,
    ExportProfilesServiceResponse,
)
from prometheus_client import CollectorRegistry, generate_latest

from tests.unit.results.fake_collector import GrpcCollector, Reply, Tls, decode, folded_of
from tests.unit.results.fake_sinks import Answer, FakeSink, go_pprof_raw, running
from tests.unit.results.test_export import (  # noqa: F401
    STACKS,
    STARTED,
    Make,
    make,
    metric,
    secret,
    wait_for_metric,
)
from webhook.certs import pki
from webhook.results.export import ExportSettings, ExportSettingsError
from webhook.results.store import Run, Store
from webhook.stacks import Stack, folded

META = {"container": "debug-toolset", "schedule": "namespace/shop#0", "duration": 30,
        "frequency": 99, "appContainer": "app", "serviceName": "web", "serviceVersion": "1.4.2",
        "podUid": "6f1c0e0a-1b2c-4d5e-8f90-0123456789ab"}
STARTED_NS = int(STARTED.timestamp()) * 1_000_000_000
OK = Answer(body=ExportProfilesServiceResponse().SerializeToString(),
            headers={"Content-Type": "application/x-protobuf"})


@pytest.fixture
def run(tmp_path: Path) -> Run:
    return Store(tmp_path / "results").save("shop", "web-1", "perf", STACKS, started=STARTED,
                                             meta=META)


def attributes(request: ExportProfilesServiceRequest, indices: Any) -> dict[str, str]:
    table = request.dictionary
    return {table.string_table[table.attribute_table[i].key_strindex]:
            table.attribute_table[i].value.string_value for i in indices}


@pytest.fixture
def collector() -> Iterator[FakeSink]:
    with running(FakeSink(then=OK)) as sink:
        yield sink


def check_request(request: ExportProfilesServiceRequest, run: Run, tmp_path: Path) -> None:
    """Every field the issue names, on a CPU run recorded at 99 Hz for 30 s."""
    [resource] = request.resource_profiles
    assert {a.key: a.value.string_value for a in resource.resource.attributes} == {
        "k8s.namespace.name": "shop", "k8s.pod.name": "web-1", "k8s.container.name": "app",
        "k8s.pod.uid": "6f1c0e0a-1b2c-4d5e-8f90-0123456789ab", "service.name": "web",
        "service.version": "1.4.2", "deployment.environment.name": "prod"}
    [scope] = resource.scope_profiles
    assert scope.scope.name == "sidecar-debug"
    [profile] = scope.profiles
    strings = request.dictionary.string_table
    # As OpenTelemetry's eBPF profiler sends CPU samples, and Pyroscope files them as
    # process_cpu (it matches samples:count:cpu:nanoseconds).
    assert (strings[profile.sample_type.type_strindex],
            strings[profile.sample_type.unit_strindex]) == ("samples", "count")
    assert (strings[profile.period_type.type_strindex],
            strings[profile.period_type.unit_strindex], profile.period) == (
        "cpu", "nanoseconds", 1_000_000_000 // 99)
    assert profile.time_unix_nano == STARTED_NS
    assert profile.duration_nano == 30 * 1_000_000_000
    assert len(profile.profile_id) == 16 and any(profile.profile_id)
    assert folded_of(request, 1) == STACKS  # every sample, names as recorded
    assert attributes(request, profile.attribute_indices) == {
        "sidecar_debug.technique": "perf", "sidecar_debug.schedule": "namespace/shop#0",
        "sidecar_debug.run": run.id}
    assert profile.original_payload_format == "pprof"
    original = go_pprof_raw(profile.original_payload, tmp_path)
    assert original.stacks == STACKS
    assert original.sample_type == "samples/count"


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
    assert received.headers["otlp-profiles-development-version"] == "1"
    assert received.headers["authorization"] == "Bearer otel-t0ken"
    assert received.headers["x-scope-orgid"] == "team-a"
    check_request(decode(received.body), run, tmp_path)


def test_otlp_grpc_request_shape(tmp_path: Path, run: Run, make: Make) -> None:  # noqa: F811
    secrets = secret(tmp_path, "otlp", token="otel-t0ken", tenant="team-a")
    registry = CollectorRegistry()
    with GrpcCollector() as grpc_collector:
        made = make({"otlp": {"url": grpc_collector.url, "protocol": "grpc",
                              "existingSecret": "otel",
                              "resourceAttributes": {"deployment.environment.name": "prod"}}},
                    secrets, registry=registry)
        made.export(run)
        [received] = grpc_collector.wait_for(1)
        wait_for_metric(registry, "sidecar_debug_exports_total", 1, sink="otlp",
                        outcome="sent")
    assert received.metadata["authorization"] == "Bearer otel-t0ken"
    assert received.metadata["x-scope-orgid"] == "team-a"
    assert received.metadata["otlp-profiles-development-version"] == "1"
    assert received.metadata["user-agent"].startswith("sidecar-debug ")
    check_request(decode(received.body), run, tmp_path)
    assert metric(registry, "sidecar_debug_export_attempts_total", sink="otlp",
                  result="ok") == 1


def test_otlp_grpc_over_tls_trusts_the_secrets_ca(tmp_path: Path, run: Run,
                                                  make: Make) -> None:  # noqa: F811
    tls = Tls()
    secrets = secret(tmp_path, "otlp", **{"ca.crt": tls.ca.cert_pem.decode()})
    registry = CollectorRegistry()
    with GrpcCollector(tls=tls) as grpc_collector:
        make({"otlp": {"url": grpc_collector.url, "protocol": "grpc",
                       "existingSecret": "otel"}}, secrets, registry=registry).export(run)
        grpc_collector.wait_for(1)
        wait_for_metric(registry, "sidecar_debug_exports_total", 1, sink="otlp",
                        outcome="sent")


def test_otlp_grpc_refuses_a_collector_its_ca_did_not_sign(tmp_path: Path, run: Run,
                                                          make: Make) -> None:  # noqa: F811
    """A certificate the Secret's CA did not sign: nothing is sent, the attempt is counted as
    tls and not retried (another CA will not appear by waiting), the exporter keeps going."""
    other = pki.generate_ca()
    secrets = secret(tmp_path, "otlp", **{"ca.crt": other.cert_pem.decode()})
    registry = CollectorRegistry()
    with GrpcCollector(tls=Tls()) as grpc_collector:
        made = make({"otlp": {"url": grpc_collector.url, "protocol": "grpc",
                              "existingSecret": "otel"}, "attempts": 3},
                    secrets, registry=registry)
        made.export(run)
        wait_for_metric(registry, "sidecar_debug_exports_total", 1, sink="otlp",
                        outcome="rejected")
        assert grpc_collector.received == []
    assert metric(registry, "sidecar_debug_export_attempts_total", sink="otlp",
                  result="tls") == 1


def test_otlp_grpc_plaintext_to_a_tls_collector_fails_without_crashing(
        tmp_path: Path, run: Run, make: Make) -> None:  # noqa: F811
    registry = CollectorRegistry()
    with GrpcCollector(tls=Tls()) as grpc_collector:
        made = make({"otlp": {"url": f"http://127.0.0.1:{grpc_collector.port}",
                              "protocol": "grpc"}, "attempts": 2, "timeoutSeconds": 2},
                    registry=registry)
        made.export(run)
        wait_for_metric(registry, "sidecar_debug_exports_total", 1, sink="otlp",
                        outcome="failed")
        assert grpc_collector.received == []
    assert metric(registry, "sidecar_debug_export_attempts_total", sink="otlp",
                  result="connection") == 2


def test_otlp_grpc_unreachable_is_retried_then_counted(run: Run, make: Make) -> None:  # noqa: F811
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]  # bound, never listening: connection refused
        registry = CollectorRegistry()
        made = make({"otlp": {"url": f"http://127.0.0.1:{port}", "protocol": "grpc"},
                     "attempts": 3}, registry=registry)
        made.export(run)
        wait_for_metric(registry, "sidecar_debug_exports_total", 1, sink="otlp",
                        outcome="failed")
    assert metric(registry, "sidecar_debug_export_attempts_total", sink="otlp",
                  result="connection") == 3


def test_otlp_grpc_unavailable_is_retried(tmp_path: Path, run: Run,
                                          make: Make) -> None:  # noqa: F811
    registry = CollectorRegistry()
    with GrpcCollector([Reply(grpc.StatusCode.UNAVAILABLE, "memory limiter")]) as grpc_collector:
        made = make({"otlp": {"url": grpc_collector.url, "protocol": "grpc"}},
                    registry=registry)
        made.export(run)
        assert len(grpc_collector.wait_for(2)) == 2
        wait_for_metric(registry, "sidecar_debug_exports_total", 1, sink="otlp",
                        outcome="sent")
    assert metric(registry, "sidecar_debug_export_attempts_total", sink="otlp",
                  result="unavailable") == 1


def test_otlp_grpc_invalid_argument_is_refused_with_its_message(
        run: Run, make: Make, caplog: pytest.LogCaptureFixture) -> None:  # noqa: F811
    registry = CollectorRegistry()
    refusal = Reply(grpc.StatusCode.INVALID_ARGUMENT,
                    "invalid or unsupported otlp-profiles-development-version")
    with caplog.at_level(logging.ERROR, "sidecar-debug.export"), \
            GrpcCollector(then=refusal) as grpc_collector:
        made = make({"otlp": {"url": grpc_collector.url, "protocol": "grpc"}, "attempts": 3},
                    registry=registry)
        made.export(run)
        wait_for_metric(registry, "sidecar_debug_exports_total", 1, sink="otlp",
                        outcome="rejected")
        assert len(grpc_collector.received) == 1
    assert metric(registry, "sidecar_debug_export_attempts_total", sink="otlp",
                  result="invalid_argument") == 1
    assert "unsupported otlp-profiles-development-version" in caplog.text


def test_otlp_grpc_deadline_is_the_timeout(run: Run, make: Make) -> None:  # noqa: F811
    registry = CollectorRegistry()
    with GrpcCollector(then=Reply(delay=10)) as grpc_collector:
        made = make({"otlp": {"url": grpc_collector.url, "protocol": "grpc"}, "attempts": 1,
                     "timeoutSeconds": 0.5}, registry=registry)
        made.export(run)
        wait_for_metric(registry, "sidecar_debug_exports_total", 1, sink="otlp",
                        outcome="failed")
    assert metric(registry, "sidecar_debug_export_attempts_total", sink="otlp",
                  result="timeout") == 1


def test_otlp_grpc_a_message_too_large_for_the_collector_is_not_retried(
        run: Run, make: Make, caplog: pytest.LogCaptureFixture) -> None:  # noqa: F811
    registry = CollectorRegistry()
    with caplog.at_level(logging.ERROR, "sidecar-debug.export"), \
            GrpcCollector(max_receive=200) as grpc_collector:
        make({"otlp": {"url": grpc_collector.url, "protocol": "grpc"}, "attempts": 3},
             registry=registry).export(run)
        wait_for_metric(registry, "sidecar_debug_exports_total", 1, sink="otlp",
                        outcome="rejected")
        assert grpc_collector.received == []
    assert metric(registry, "sidecar_debug_export_attempts_total", sink="otlp",
                  result="too_large") == 1
    assert "max_recv_msg_size_mib" in caplog.text


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_a_partial_success_is_a_counted_refusal(run: Run, make: Make, protocol: str,  # noqa: F811
                                                caplog: pytest.LogCaptureFixture) -> None:
    """The collector took the request but rejected the profile: not retried (OTLP: the same
    data would be rejected again), counted as rejected, its message in the log."""
    registry = CollectorRegistry()
    message = "profile has no samples of a known type"
    partial = ExportProfilesServiceResponse(partial_success=ExportProfilesPartialSuccess(
        rejected_profiles=1, error_message=message))
    with caplog.at_level(logging.ERROR, "sidecar-debug.export"), \
            _collector(protocol, Answer(body=partial.SerializeToString(),
                                        headers={"Content-Type": "application/x-protobuf"}),
                       Reply(rejected=1, message=message)) as (url, received):
        made = make({"otlp": {"url": url, "protocol": protocol}, "attempts": 3},
                    registry=registry)
        made.export(run)
        wait_for_metric(registry, "sidecar_debug_exports_total", 1, sink="otlp",
                        outcome="rejected")
        assert len(received()) == 1
    assert metric(registry, "sidecar_debug_export_attempts_total", sink="otlp",
                  result="partial") == 1
    assert f"partial success: 1 profile(s) rejected: {message}" in caplog.text


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_a_warning_without_rejection_is_sent_and_logged(
        run: Run, make: Make, protocol: str, caplog: pytest.LogCaptureFixture) -> None:  # noqa: F811
    registry = CollectorRegistry()
    warning = ExportProfilesServiceResponse(partial_success=ExportProfilesPartialSuccess(
        error_message="2 frames had no mapping"))
    with caplog.at_level(logging.WARNING, "sidecar-debug.export"), \
            _collector(protocol, Answer(body=warning.SerializeToString()),
                       Reply(message="2 frames had no mapping")) as (url, _received):
        make({"otlp": {"url": url, "protocol": protocol}},
             registry=registry).export(run)
        wait_for_metric(registry, "sidecar_debug_exports_total", 1, sink="otlp",
                        outcome="sent")
    assert "the collector warns: 2 frames had no mapping" in caplog.text


@contextmanager
def _collector(protocol: str, http: Answer, grpc_reply: Reply
               ) -> Iterator[tuple[str, Callable[[], list[Any]]]]:
    if protocol == "grpc":
        with GrpcCollector(then=grpc_reply) as grpc_collector:
            yield grpc_collector.url, lambda: grpc_collector.received
    else:
        with running(FakeSink(then=http)) as sink:
            yield sink.url, lambda: sink.received


def test_an_http_error_says_the_collectors_status_message(
        run: Run, make: Make, caplog: pytest.LogCaptureFixture) -> None:  # noqa: F811
    """OTLP/HTTP errors carry a google.rpc.Status in protobuf: its message reaches the log."""
    message = b"invalid or unsupported otlp-profiles-development-version"
    status = b"\x08\x03\x12" + bytes([len(message)]) + message  # code 3, message
    registry = CollectorRegistry()
    with caplog.at_level(logging.ERROR, "sidecar-debug.export"), \
            running(FakeSink(then=Answer(status=400, body=status, headers={
                "Content-Type": "application/x-protobuf"}))) as sink:
        make({"otlp": {"url": sink.url}}, registry=registry).export(run)
        wait_for_metric(registry, "sidecar_debug_exports_total", 1, sink="otlp",
                        outcome="rejected")
    assert f"HTTP 400: {message.decode()}" in caplog.text


def test_an_answer_that_is_not_otlp_is_a_refusal(run: Run, make: Make) -> None:  # noqa: F811
    """A 200 from something that is not an OTLP receiver (a proxy's page, a wrong port) is not
    counted as sent."""
    registry = CollectorRegistry()
    with running(FakeSink(then=Answer(body=b"<html>login</html>"))) as sink:
        make({"otlp": {"url": sink.url}}, registry=registry).export(run)
        wait_for_metric(registry, "sidecar_debug_exports_total", 1, sink="otlp",
                        outcome="rejected")
    assert metric(registry, "sidecar_debug_export_attempts_total", sink="otlp",
                  result="not_otlp") == 1


def test_a_hung_grpc_collector_does_not_hold_up_the_other_sinks(
        tmp_path: Path, make: Make) -> None:  # noqa: F811
    store = Store(tmp_path / "results")
    runs = [store.save("shop", f"web-{i}", "perf", STACKS, started=STARTED, meta=META)
            for i in range(3)]
    registry = CollectorRegistry()
    with GrpcCollector(then=Reply(delay=30)) as grpc_collector, \
            running(FakeSink()) as pyroscope:
        made = make({"otlp": {"url": grpc_collector.url, "protocol": "grpc"},
                     "pyroscope": {"url": pyroscope.url}, "timeoutSeconds": 30},
                    registry=registry)
        for stored in runs:
            made.export(stored)
        assert len(pyroscope.wait_for(3)) == 3  # while the collector holds its first request
        assert len(grpc_collector.wait_for(1)) == 1
        assert metric(registry, "sidecar_debug_exports_total", sink="otlp", outcome="sent") == 0
        made.close(0.1)


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
    # Pyroscope's off-CPU shape: off_cpu:nanoseconds with no period.
    assert (strings[profile.sample_type.type_strindex],
            strings[profile.sample_type.unit_strindex]) == ("off_cpu", "nanoseconds")
    assert profile.period == 0 and not profile.HasField("period_type")
    assert profile.duration_nano == 5 * 1_000_000_000
    assert folded_of(request, 1000) == offcpu
    original = go_pprof_raw(profile.original_payload, tmp_path)
    assert original.sample_type == "off_cpu/nanoseconds"
    assert original.stacks == {stack: value * 1000 for stack, value in offcpu.items()}
    assert {a.key for a in request.resource_profiles[0].resource.attributes} == {
        "k8s.namespace.name", "k8s.pod.name"}  # no app label, no single app container known


def test_symbol_text_is_carried_as_data(tmp_path: Path, make: Make,  # noqa: F811
                                        collector: FakeSink) -> None:
    hostile: dict[Stack, int] = {("app", "<script>alert(1)</script>", "a b\u202e", "\x00"): 3}
    stored = Store(tmp_path).save("shop", "web-1", "perf", hostile, started=STARTED,
                                  meta={"frequency": 100})
    make({"otlp": {"url": collector.url}}).export(stored)
    [received] = collector.wait_for(1)
    assert folded_of(decode(received.body), 1) == hostile


@pytest.mark.parametrize(("raw", "where"), [
    ({"otlp": {"url": "grpc://collector:4317"}}, "results.export.otlp.url"),
    ({"otlp": {"url": "http://c:4318", "protocol": "grpc/json"}},
     "results.export.otlp.protocol"),
    ({"otlp": {"url": "https://c:4317/v1development", "protocol": "grpc"}},
     "results.export.otlp.url"),
    ({"otlp": {"url": "http://c:4318", "resourceAttributes": {"service.version": "x"}}},
     "results.export.otlp.resourceAttributes"),
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
    """service.name as OpenTelemetry's conventions derive it in Kubernetes: the annotation,
    then app.kubernetes.io/instance, app.kubernetes.io/name, then (ours) app."""
    from webhook.results.service import app_identity

    pod: dict[str, Any] = {
        "metadata": {"uid": "u-1", "labels": {"app.kubernetes.io/name": "books",
                                              "app.kubernetes.io/version": "2.0",
                                              "app": "other"}},
        "spec": {"containers": [{"name": "debug-toolset"}, {"name": "books"}]}}
    assert app_identity(pod, "debug-toolset") == {
        "serviceName": "books", "serviceVersion": "2.0", "podUid": "u-1",
        "appContainer": "books"}
    pod["metadata"]["labels"]["app.kubernetes.io/instance"] = "books-eu"
    assert app_identity(pod, "debug-toolset")["serviceName"] == "books-eu"
    pod["metadata"]["annotations"] = {
        "resource.opentelemetry.io/service.name": "catalogue",
        "resource.opentelemetry.io/service.version": "2.0.1"}
    named = app_identity(pod, "debug-toolset")
    assert (named["serviceName"], named["serviceVersion"]) == ("catalogue", "2.0.1")
    two = {"metadata": {"labels": {"app": "web"}},
           "spec": {"containers": [{"name": "a"}, {"name": "b"}, {"name": "debug-toolset"}]}}
    assert app_identity(two, "debug-toolset") == {"serviceName": "web"}
    assert app_identity({"metadata": {}, "spec": {"containers": "junk"}}, "x") == {}
    hostile = {"metadata": {"annotations": {"resource.opentelemetry.io/service.name": ["x"],
                                            "resource.opentelemetry.io/service.version":
                                                "a\nb" + "c" * 500}}}
    assert app_identity(hostile, "x") == {"serviceVersion": "a b" + "c" * 197}


# --- mutual TLS and the Secret's headers, both transports -----------------------------------------

@contextmanager
def _tls_collector(protocol: str, tls: Tls, tmp_path: Path
                   ) -> Iterator[tuple[str, Callable[[], list[dict[str, str]]]]]:
    """(url, the headers or metadata of every request received) of a TLS stand-in."""
    if protocol == "grpc":
        with GrpcCollector(tls=tls) as grpc_collector:
            yield grpc_collector.url, lambda: [r.metadata for r in grpc_collector.received]
    else:
        with running(FakeSink(then=OK, tls=tls.server_context(tmp_path))) as sink:
            yield sink.url, lambda: [r.headers for r in sink.received]


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_mutual_tls_presents_the_secrets_client_certificate(
        tmp_path: Path, run: Run, make: Make, protocol: str) -> None:  # noqa: F811
    tls = Tls(clients=pki.generate_ca("clients"))
    client = tls.client()
    secrets = secret(tmp_path, "otlp", **{"ca.crt": tls.ca.cert_pem.decode(),
                                          "tls.crt": client.cert_pem.decode(),
                                          "tls.key": client.key_pem.decode(),
                                          "headers": "x-honeycomb-team=k3y,x-note=a%2Cb"})
    registry = CollectorRegistry()
    with _tls_collector(protocol, tls, tmp_path) as (url, received):
        make({"otlp": {"url": url, "protocol": protocol, "existingSecret": "otel"}},
             secrets, registry=registry).export(run)
        wait_for_metric(registry, "sidecar_debug_exports_total", 1, sink="otlp",
                        outcome="sent")
        [headers] = received()
    assert (headers["x-honeycomb-team"], headers["x-note"]) == ("k3y", "a,b")


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_without_the_client_certificate_a_mutual_tls_collector_gets_nothing(
        tmp_path: Path, run: Run, make: Make, protocol: str) -> None:  # noqa: F811
    tls = Tls(clients=pki.generate_ca("clients"))
    secrets = secret(tmp_path, "otlp", **{"ca.crt": tls.ca.cert_pem.decode()})
    registry = CollectorRegistry()
    with _tls_collector(protocol, tls, tmp_path) as (url, received):
        make({"otlp": {"url": url, "protocol": protocol, "existingSecret": "otel"},
              "attempts": 2}, secrets, registry=registry).export(run)
        deadline = time.monotonic() + 20
        while not (metric(registry, "sidecar_debug_exports_total", sink="otlp",
                          outcome="failed")
                   or metric(registry, "sidecar_debug_exports_total", sink="otlp",
                             outcome="rejected")):
            assert time.monotonic() < deadline, generate_latest(registry).decode()
            time.sleep(0.01)
        assert received() == []
    # The server's TLS alert (certificate required) is a refusal, not retried; when the client
    # reads the closed socket before the alert (HTTPS, by a race; gRPC always: "Socket
    # closed"), it is a connection failure, retried, then failed.
    tls_refused = metric(registry, "sidecar_debug_export_attempts_total", sink="otlp",
                         result="tls")
    outcome = "rejected" if tls_refused else "failed"
    assert metric(registry, "sidecar_debug_exports_total", sink="otlp", outcome=outcome) == 1
    assert tls_refused == 1 or metric(registry, "sidecar_debug_export_attempts_total",
                                      sink="otlp", result="connection") == 2


@pytest.mark.parametrize(("files", "problem"), [
    ({"headers": "content-type=text/plain"}, "set by the exporter"),
    ({"headers": "grpc-timeout=1S"}, "set by the exporter"),
    ({"headers": "x-key"}, "is not a header name"),
    ({"headers": "x-key=a%0Ab"}, "printable"),
    ({"headers": "authorization=Api-Token x", "token": "t"}, "keep one"),
    ({"tls.crt": "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"},
     "needs both"),
])
@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_credentials_that_cannot_be_sent_are_refused_before_sending(
        tmp_path: Path, run: Run, make: Make, protocol: str, files: dict[str, str],  # noqa: F811
        problem: str, caplog: pytest.LogCaptureFixture) -> None:
    secrets = secret(tmp_path, "otlp", **files)
    registry = CollectorRegistry()
    scheme_tls = Tls() if "tls.crt" in files else None
    with caplog.at_level(logging.ERROR, "sidecar-debug.export"), \
            (_tls_collector(protocol, scheme_tls, tmp_path) if scheme_tls
             else _collector(protocol, OK, Reply())) as (url, received):
        make({"otlp": {"url": url, "protocol": protocol, "existingSecret": "otel"}},
             secrets, registry=registry).export(run)
        wait_for_metric(registry, "sidecar_debug_exports_total", 1, sink="otlp",
                        outcome="rejected")
        assert received() == []
    assert metric(registry, "sidecar_debug_export_attempts_total", sink="otlp",
                  result="credentials") == 1
    assert problem in caplog.text
