"""Export of stored runs to Grafana Pyroscope and Parca, against local fake servers that check
the request shapes those servers document (fake_sinks.py), and pprof decoded by Go's pprof."""

from __future__ import annotations

import base64
import json
import logging
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from tests.unit.results.fake_sinks import Answer, FakeSink, go_pprof_raw, running
from webhook.results.export import Exporters, ExportSettings, ExportSettingsError
from webhook.results.store import Run, Store
from webhook.stacks import folded

STARTED = datetime(2026, 12, 3, 8, 0, 0, tzinfo=UTC)
FOLDED = """\
node;main;JS:*fibonacci /app/app.js:1:19 60
node;main;uv_run;epoll_wait_[k] 25
node;main 10
node;[libc.so.6];écriture ünïcode 5
"""
STACKS = folded.parse(FOLDED)
META = {"container": "app", "schedule": "namespace/shop#0", "duration": 30, "frequency": 99}


@pytest.fixture
def run(tmp_path: Path) -> Run:
    return Store(tmp_path / "results").save("shop", "web-1", "perf", STACKS, started=STARTED,
                                             meta=META)


def exporters(raw: dict[str, Any], secrets: Path | None = None,
              registry: CollectorRegistry | None = None) -> Exporters:
    settings = ExportSettings.from_mapping(
        {"backoffSeconds": 0.01, "timeoutSeconds": 2, **raw},
        secrets_root=secrets or Path("/nonexistent"))
    return Exporters.from_settings(settings, registry=registry or CollectorRegistry())


Make = Callable[..., Exporters]


@pytest.fixture
def make() -> Iterator[Make]:
    """exporters(...), stopped after the test."""
    made: list[Exporters] = []

    def factory(*args: Any, **kwargs: Any) -> Exporters:
        made.append(exporters(*args, **kwargs))
        return made[-1]

    yield factory
    for item in made:
        item.close(5)


def metric(registry: CollectorRegistry, name: str, **labels: str) -> float:
    value = registry.get_sample_value(name, labels)
    return 0.0 if value is None else value


def wait_for_metric(registry: CollectorRegistry, name: str, value: float,
                    **labels: str) -> None:
    import time

    deadline = time.monotonic() + 20
    while metric(registry, name, **labels) < value:
        assert time.monotonic() < deadline, generate_latest(registry).decode()
        time.sleep(0.01)


def secret(tmp_path: Path, kind: str, **files: str) -> Path:
    root = tmp_path / "secrets"
    (root / kind).mkdir(parents=True, exist_ok=True)
    for key, value in files.items():
        (root / kind / key).write_text(value)
    return root


# --- Pyroscope ------------------------------------------------------------------------------------

def pyroscope_labelset(name: str) -> dict[str, str]:
    """Pyroscope's api/model/labelset Parse, transcribed: the application name up to '{', then
    key=value pairs ended by ',' or '}', each trimmed."""
    labels: dict[str, str] = {}
    state, key, value = "name", "", ""
    for char in name + "{":
        if state == "name":
            if char == "{":
                labels["__name__"] = value.strip()
                state, value = "key", ""
            else:
                value += char
        elif state == "key":
            if char == "}":
                state = "done"
            elif char == "=":
                state, value = "value", ""
            else:
                key += char
        elif state == "value":
            if char in ",}":
                labels[key.strip()] = value.strip()
                state, key = "key", ""
            else:
                value += char
    return labels


def test_pyroscope_ingest_request_shape(tmp_path: Path, run: Run,
                                        make: Make) -> None:
    secrets = secret(tmp_path, "pyroscope", username="12345\n", password="glc_s3cret\n",
                     tenant="team-a")
    registry = CollectorRegistry()
    with running(FakeSink()) as sink:
        made = make({"pyroscope": {"url": sink.url + "/", "existingSecret": "creds",
                                        "labels": {"cluster": "prod"}}}, secrets, registry)
        made.export(run)
        [request] = sink.wait_for(1)
    assert (request.method, request.path) == ("POST", "/ingest")
    query = {key: values[0] for key, values in request.query.items()}
    assert all(len(values) == 1 for values in request.query.values())
    start = int(STARTED.timestamp())
    assert query == {
        "name": "sidecar-debug.cpu{cluster=prod,container=app,namespace=shop,pod=web-1,"
                "schedule=namespace/shop#0,technique=perf}",
        "from": str(start), "until": str(start + 30), "format": "folded", "sampleRate": "99",
        "spyName": "sidecar-debug", "units": "samples", "aggregationType": "sum"}
    assert pyroscope_labelset(query["name"]) == {
        "__name__": "sidecar-debug.cpu", "cluster": "prod", "container": "app",
        "namespace": "shop", "pod": "web-1", "schedule": "namespace/shop#0",
        "technique": "perf"}
    assert request.headers["authorization"] == "Basic " + base64.b64encode(
        b"12345:glc_s3cret").decode()
    assert request.headers["x-scope-orgid"] == "team-a"
    assert request.headers["content-type"] == "text/plain; charset=utf-8"
    assert folded.parse(request.body.decode()) == STACKS  # every sample, names as recorded
    assert request.body.decode().splitlines()[0] == "node;main;JS:*fibonacci /app/app.js:1:19 60"
    wait_for_metric(registry, "sidecar_debug_exports_total", 1, sink="pyroscope",
                    outcome="sent")
    assert metric(registry, "sidecar_debug_export_attempts_total", sink="pyroscope",
                  result="200") == 1


def test_values_from_a_pod_cannot_add_pyroscope_labels(tmp_path: Path,
                                                      make: Make) -> None:
    """A container name or schedule that a pod chose is data: ',', '{', '}', '=' and spaces
    would end the label, add labels or change the application name."""
    hostile = Store(tmp_path).save("shop", "web-1", "perf", STACKS, started=STARTED, meta={
        "container": "app,technique=fake}x", "schedule": " {tenant=other} "})
    with running(FakeSink()) as sink:
        made = make({"pyroscope": {"url": sink.url}})
        made.export(hostile)
        [request] = sink.wait_for(1)
    labels = pyroscope_labelset(request.query["name"][0])
    assert labels["technique"] == "perf" and labels["__name__"] == "sidecar-debug.cpu"
    assert labels["container"] == "app_technique_fake_x"
    assert labels["schedule"] == "__tenant_other__"
    assert set(labels) == {"__name__", "container", "namespace", "pod", "schedule", "technique"}
    assert "authorization" not in request.headers and "x-scope-orgid" not in request.headers


# --- Parca ----------------------------------------------------------------------------------------

def test_parca_writeraw_request_shape_and_pprof(tmp_path: Path, run: Run,
                                                make: Make) -> None:
    secrets = secret(tmp_path, "parca", token="psc_t0ken")
    with running(FakeSink()) as sink:
        made = make({"parca": {"url": sink.url, "existingSecret": "parca-creds"}}, secrets)
        made.export(run)
        [request] = sink.wait_for(1)
    assert (request.method, request.path, request.query) == ("POST", "/profiles/writeraw", {})
    assert request.headers["content-type"] == "application/json"
    assert request.headers["authorization"] == "Bearer psc_t0ken"
    body = json.loads(request.body)
    # gRPC-gateway JSON of WriteRawRequest{series: [RawProfileSeries{labels: LabelSet{labels},
    # samples: [RawSample{raw_profile}]}], normalized}: nothing else.
    assert set(body) == {"series", "normalized"} and body["normalized"] is True
    [series] = body["series"]
    assert set(series) == {"labels", "samples"} and set(series["labels"]) == {"labels"}
    assert series["labels"]["labels"] == [
        {"name": "__name__", "value": "process_cpu"}, {"name": "container", "value": "app"},
        {"name": "namespace", "value": "shop"}, {"name": "pod", "value": "web-1"},
        {"name": "schedule", "value": "namespace/shop#0"}, {"name": "technique", "value": "perf"}]
    [sample] = series["samples"]
    assert set(sample) == {"rawProfile"}
    raw = base64.b64decode(sample["rawProfile"], validate=True)
    assert raw[:2] == b"\x1f\x8b"  # Parca gunzips what starts so
    decoded = go_pprof_raw(raw, tmp_path)
    assert decoded.stacks == STACKS  # the same samples under the same function names
    assert decoded.location_ids == list(range(1, len(decoded.location_ids) + 1))  # sequential
    assert decoded.sample_type == "samples/count"
    assert decoded.header["PeriodType"] == "cpu nanoseconds"
    assert decoded.header["Period"] == str(1_000_000_000 // 99)
    assert decoded.header["Time"].startswith("2026-12-03 08:00:00 +0000 UTC")
    assert decoded.header["Duration"] == "30s"


# --- retries, timeouts, failures ------------------------------------------------------------------

def test_server_errors_are_retried_with_backoff_until_success(run: Run,
                                                              make: Make) -> None:
    registry = CollectorRegistry()
    script = [Answer(503, b"ingester not ready"), Answer(429, headers={"Retry-After": "0"}),
              Answer(200)]
    with running(FakeSink(script)) as sink:
        made = make({"pyroscope": {"url": sink.url}}, registry=registry)
        made.export(run)
        requests = sink.wait_for(3)
        wait_for_metric(registry, "sidecar_debug_exports_total", 1, sink="pyroscope",
                        outcome="sent")
    assert [r.body for r in requests] == [requests[0].body] * 3  # the same run each time
    for result in ("503", "429", "200"):
        assert metric(registry, "sidecar_debug_export_attempts_total", sink="pyroscope",
                      result=result) == 1


def test_a_timeout_is_retried(run: Run, make: Make) -> None:
    registry = CollectorRegistry()
    with running(FakeSink([Answer(delay=10)])) as sink:
        made = make({"timeoutSeconds": 0.3, "parca": {"url": sink.url}},
                         registry=registry)
        made.export(run)
        sink.wait_for(2)
        wait_for_metric(registry, "sidecar_debug_exports_total", 1, sink="parca", outcome="sent")
    assert metric(registry, "sidecar_debug_export_attempts_total", sink="parca",
                  result="timeout") == 1


def test_a_refusal_is_not_retried(run: Run, make: Make,
                                  caplog: pytest.LogCaptureFixture) -> None:
    registry = CollectorRegistry()
    answer = Answer(400, b'{"code":3,"message":"invalid label name: 1x"}')
    with running(FakeSink(then=answer)) as sink, caplog.at_level(logging.ERROR):
        made = make({"parca": {"url": sink.url}}, registry=registry)
        made.export(run)
        wait_for_metric(registry, "sidecar_debug_exports_total", 1, sink="parca",
                        outcome="rejected")
        assert len(sink.received) == 1
    assert "HTTP 400: {\"code\":3,\"message\":\"invalid label name: 1x\"}" in caplog.text


def test_a_dead_sink_fails_after_the_attempts(run: Run, make: Make) -> None:
    registry = CollectorRegistry()
    with running(FakeSink(then=Answer(close=True))) as sink:
        made = make({"attempts": 3, "pyroscope": {"url": sink.url}}, registry=registry)
        made.export(run)
        wait_for_metric(registry, "sidecar_debug_exports_total", 1, sink="pyroscope",
                        outcome="failed")
        assert len(sink.received) == 3
    assert metric(registry, "sidecar_debug_export_attempts_total", sink="pyroscope",
                  result="connection") == 3


def test_nothing_listening_fails_without_blocking(run: Run, make: Make) -> None:
    registry = CollectorRegistry()
    sink = FakeSink()
    url = sink.url
    sink.server.server_close()  # the port is free again: connection refused
    made = make({"attempts": 2, "pyroscope": {"url": url}}, registry=registry)
    made.export(run)
    wait_for_metric(registry, "sidecar_debug_exports_total", 1, sink="pyroscope",
                    outcome="failed")


def test_a_hanging_sink_never_blocks_export_and_its_queue_is_bounded(
        tmp_path: Path, make: Make) -> None:
    """The sink answers nothing: export() still returns at once for every run, the other sink
    gets all of them, and beyond the queue's size runs are dropped and counted."""
    registry = CollectorRegistry()
    store = Store(tmp_path)
    with running(FakeSink(then=Answer(delay=60))) as hanging, running(FakeSink()) as healthy:
        made = make({"queueSize": 2, "timeoutSeconds": 60,
                          "pyroscope": {"url": hanging.url}, "parca": {"url": healthy.url}},
                         registry=registry)
        runs = [store.save("shop", f"web-{i}", "perf", STACKS, started=STARTED)
                for i in range(6)]
        made.export(runs[0])
        hanging.wait_for(1)  # the first run is being sent (and hangs); 5 more arrive
        for count, item in enumerate(runs[1:], 2):
            made.export(item)
            healthy.wait_for(count)
        # 1 in flight + 2 queued; 3 dropped.
        assert metric(registry, "sidecar_debug_exports_total", sink="pyroscope",
                      outcome="dropped") == 3
        assert metric(registry, "sidecar_debug_export_queue_length", sink="pyroscope") == 3
        wait_for_metric(registry, "sidecar_debug_exports_total", 6, sink="parca",
                        outcome="sent")
        made.close(0.1)


def test_redirects_are_not_followed_with_the_credentials(tmp_path: Path, run: Run,
                                                         make: Make) -> None:
    registry = CollectorRegistry()
    secrets = secret(tmp_path, "pyroscope", token="t0ken")
    with running(FakeSink()) as elsewhere:
        # urllib would follow a 302 as a GET with every header but the body's.
        moved = Answer(302, headers={"Location": elsewhere.url + "/ingest"})
        with running(FakeSink(then=moved)) as sink:
            made = make({"pyroscope": {"url": sink.url, "existingSecret": "s"}}, secrets,
                             registry)
            made.export(run)
            wait_for_metric(registry, "sidecar_debug_exports_total", 1, sink="pyroscope",
                            outcome="rejected")
        assert elsewhere.received == []


def test_a_rotated_secret_is_used_without_a_restart(tmp_path: Path, run: Run,
                                                    make: Make) -> None:
    secrets = secret(tmp_path, "parca", token="old")
    with running(FakeSink()) as sink:
        made = make({"parca": {"url": sink.url, "existingSecret": "s"}}, secrets)
        made.export(run)
        sink.wait_for(1)
        (secrets / "parca" / "token").write_text("new")
        made.export(run)
        second = sink.wait_for(2)[1]
    assert second.headers["authorization"] == "Bearer new"


def test_a_broken_secret_is_a_refusal_not_a_crash(tmp_path: Path, run: Run,
                                                  make: Make) -> None:
    registry = CollectorRegistry()
    secrets = secret(tmp_path, "parca", username="only-a-user")
    with running(FakeSink()) as sink:
        made = make({"parca": {"url": sink.url, "existingSecret": "s"}}, secrets, registry)
        made.export(run)
        wait_for_metric(registry, "sidecar_debug_exports_total", 1, sink="parca",
                        outcome="rejected")
        assert sink.received == []
    assert metric(registry, "sidecar_debug_export_attempts_total", sink="parca",
                  result="credentials") == 1


def test_a_run_removed_before_its_turn_is_counted(run: Run, make: Make) -> None:
    import shutil

    registry = CollectorRegistry()
    shutil.rmtree(run.path)
    with running(FakeSink()) as sink:
        made = make({"parca": {"url": sink.url}}, registry=registry)
        made.export(run)
        wait_for_metric(registry, "sidecar_debug_exports_total", 1, sink="parca",
                        outcome="unreadable")
        assert sink.received == []


def test_stopping_interrupts_the_backoff(run: Run) -> None:
    registry = CollectorRegistry()
    with running(FakeSink(then=Answer(503))) as sink:
        made = exporters({"backoffSeconds": 3600, "parca": {"url": sink.url}},
                         registry=registry)
        made.export(run)
        sink.wait_for(1)
        closer = threading.Thread(target=made.close, args=(30,))
        closer.start()
        closer.join(30)
        assert not closer.is_alive()
    assert metric(registry, "sidecar_debug_exports_total", sink="parca", outcome="failed") == 1


# --- settings -------------------------------------------------------------------------------------

def test_settings_from_the_charts_json() -> None:
    settings = ExportSettings.from_environ({"SIDECAR_DEBUG_EXPORT": json.dumps({
        "queueSize": 10, "attempts": 3, "backoffSeconds": 1, "timeoutSeconds": 5,
        "pyroscope": {"url": "https://profiles.example:4040", "applicationName": "shop",
                      "labels": {}, "existingSecret": "pyro"},
        "parca": {"url": "", "profileName": "process_cpu", "labels": {}, "existingSecret": ""},
    })})
    [sink] = settings.sinks
    assert (sink.kind, sink.name, sink.timeout) == ("pyroscope", "shop", 5.0)
    assert sink.secret_dir == Path("/etc/sidecar-debug/export/pyroscope")
    assert (settings.queue_size, settings.attempts, settings.backoff) == (10, 3, 1.0)
    assert not Exporters.from_environ({})  # nothing configured: exports nothing


@pytest.mark.parametrize(("raw", "where"), [
    ({"pyroscope": {"url": "ftp://x"}}, "results.export.pyroscope.url: must be an http"),
    ({"pyroscope": {"url": "http://u:p@x"}}, "credentials go in existingSecret"),
    ({"pyroscope": {"url": "http://x/?a=1"}}, "results.export.pyroscope.url: the base URL"),
    ({"pyroscope": {"url": "http://x", "applicationName": "a{b}"}}, "applicationName: must"),
    ({"parca": {"url": "http://x", "profileName": "process-cpu"}}, "profileName: must"),
    ({"parca": {"url": "http://x", "labels": {"pod": "x"}}}, "not a label name we may set"),
    ({"parca": {"url": "http://x", "labels": {"1x": "x"}}}, "not a label name we may set"),
    ({"parca": {"url": "http://x", "labels": {"a": 1}}}, "labels.a: must be printable"),
    ({"parca": {"url": "http://x", "tenant": "a"}}, "unknown field(s) ['tenant']"),
    ({"queueSize": 0}, "results.export.queueSize: must be an integer from 1"),
    ({"attempts": True}, "results.export.attempts: must be an integer"),
    ({"timeoutSeconds": "10"}, "results.export.timeoutSeconds: must be a number"),
    ({"grafana": {}}, "unknown field(s) ['grafana']"),
    ([], "results.export: must be an object"),
])
def test_bad_settings_name_the_value(raw: Any, where: str) -> None:
    with pytest.raises(ExportSettingsError) as refused:
        ExportSettings.from_mapping(raw)
    assert where in str(refused.value)


# --- the results service, the one writer of the store -------------------------------------------

def test_the_results_service_refuses_bad_export_settings_in_one_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Checked before anything else (certificate, cluster): a typo fails the rollout."""
    from webhook.commands import cli

    monkeypatch.setenv("SIDECAR_DEBUG_EXPORT", '{"parca": {"url": "parca:7070"}}')
    code = cli.main(["results", "service", "--dir", str(tmp_path), "--audience", "a",
                     "--tls-cert-file", str(tmp_path / "missing.crt"),
                     "--tls-key-file", str(tmp_path / "missing.key"), "--tls-wait", "0",
                     "--kubeconfig", str(tmp_path / "missing")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert "invalid export settings: results.export.parca.url: must be an http" in err


def test_each_registry_gets_its_own_metrics_even_at_a_reused_address() -> None:
    """The metrics were cached by id(registry): a new registry allocated where a freed one was
    got the old one's counters, and its own stayed empty (exports counted nowhere)."""
    import gc

    from webhook.results.export import metrics as export_metrics

    seen = set()
    for _ in range(50):
        registry = CollectorRegistry()
        seen.add(id(registry))
        export_metrics.for_registry(registry).exports.labels(sink="parca", outcome="sent").inc()
        assert metric(registry, "sidecar_debug_exports_total", sink="parca", outcome="sent") == 1
        del registry
        gc.collect()
    assert len(seen) < 50  # addresses were reused: the case the cache got wrong
