"""The requests a stored run becomes, one per sink (pure: no I/O, no clock).

Grafana Pyroscope: `POST /ingest?name=APP.cpu{labels}&from=&until=&format=folded&sampleRate=
&spyName=&units=samples&aggregationType=sum` with the folded stacks as the body (the HTTP API
of Pyroscope 0.37 that Grafana Pyroscope 1.x keeps: pkg/ingester/pyroscope/ingest_handler.go).
`.cpu` makes it a process_cpu profile whose samples Pyroscope scales by 1/sampleRate seconds.

Parca: `POST /profiles/writeraw` with the gRPC-gateway JSON form of parca.profilestore.v1alpha1
WriteRawRequest (proto/parca/profilestore/v1alpha1/profilestore.proto): one series, labels
`__name__` + ours, one sample whose `rawProfile` is the gzip'd pprof, base64 as proto3's JSON
mapping writes bytes. Parca validates label names as Prometheus does and the pprof's ids as
sequential (pkg/parcacol ValidatePprofProfile); webhook.stacks.pprof.encode writes them so.

OpenTelemetry: `POST /v1development/profiles` (the OTLP/HTTP path of the profiles signal,
`opentelemetry.proto.collector.profiles.v1development.ProfilesService/Export`) with the
binary protobuf `ExportProfilesServiceRequest` as the body (webhook.stacks.otlp), resource
attributes from the Kubernetes semantic conventions, the run's pprof as the original payload;
or the same request to that gRPC method (method GRPC: `url` is the target, `headers` the
metadata besides the credentials; export/grpc_send.py sends it).
"""

from __future__ import annotations

import base64
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlencode

from webhook.results.export import collector
from webhook.results.export.settings import SinkSettings
from webhook.results.store import Run
from webhook.stacks import Stack, folded, otlp, pprof

DEFAULT_FREQUENCY = 100  # Pyroscope's default sampleRate; ours record at 99 Hz unless told
SPY_NAME = "sidecar-debug"
MAX_LABEL_VALUE = 200
# Pyroscope's /ingest name is parsed by hand: ',', '{', '}' and '=' end or start a label, and
# spaces around a value are trimmed. Values that came from a pod keep their other characters.
_PYROSCOPE_UNSAFE = re.compile(r"[,{}=\s]")


@dataclass(frozen=True)
class Request:
    method: str
    url: str
    headers: Mapping[str, str]
    body: bytes


def labels(run: Run) -> dict[str, str]:
    """The run's labels: namespace, pod, container, technique, schedule (empty ones left out:
    a run of `trap` or `flamegraph` has no schedule)."""
    meta = run.meta
    values = {"namespace": run.namespace, "pod": run.pod, "container": meta.get("container"),
              "technique": run.technique, "schedule": meta.get("schedule")}
    return {key: value[:MAX_LABEL_VALUE] for key, value in values.items()
            if isinstance(value, str) and value}


def frequency(run: Run) -> int:
    value = run.meta.get("frequency")
    if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 1_000_000:
        return value
    return DEFAULT_FREQUENCY


def window(run: Run, samples: int) -> tuple[int, int]:
    """(from, until) in Unix seconds: the recording's duration when the run says it, else as
    long as its samples took at its frequency; at least one second."""
    start = int(run.started.timestamp())
    duration = run.meta.get("duration")
    if not (isinstance(duration, int | float) and not isinstance(duration, bool)
            and 0 < duration <= 86400 * 7):
        duration = samples / frequency(run)
    return start, start + max(1, math.ceil(duration))


def pyroscope(sink: SinkSettings, run: Run, stacks: Mapping[Stack, int]) -> Request:
    values = {**sink.labels, **labels(run)}
    label_text = ",".join(f"{key}={_PYROSCOPE_UNSAFE.sub('_', value)}"
                          for key, value in sorted(values.items()))
    start, until = window(run, folded.total(stacks))
    query = urlencode({
        "name": f"{sink.name}.cpu{{{label_text}}}",
        "from": start,
        "until": until,
        "format": "folded",
        "sampleRate": frequency(run),
        "spyName": SPY_NAME,
        "units": "samples",
        "aggregationType": "sum",
    })
    return Request("POST", f"{sink.endpoint('/ingest')}?{query}",
                   {"Content-Type": "text/plain; charset=utf-8"},
                   folded.format_stacks(stacks).encode())


def parca(sink: SinkSettings, run: Run, stacks: Mapping[Stack, int]) -> Request:
    start, until = window(run, folded.total(stacks))
    profile = pprof.encode(stacks, period_ns=1_000_000_000 // frequency(run),
                            time_ns=start * 1_000_000_000,
                            duration_ns=(until - start) * 1_000_000_000, comment=run.id)
    series_labels = [{"name": "__name__", "value": sink.name}]
    values = {**sink.labels, **labels(run)}
    series_labels += [{"name": key, "value": value} for key, value in sorted(values.items())]
    body: dict[str, Any] = {
        "series": [{
            "labels": {"labels": series_labels},
            "samples": [{"rawProfile": base64.b64encode(profile).decode("ascii")}],
        }],
        "normalized": True,  # no addresses to adjust: every location is a function name
    }
    return Request("POST", sink.endpoint("/profiles/writeraw"),
                   {"Content-Type": "application/json"},
                   json.dumps(body, separators=(",", ":")).encode())


OTLP_PATH = "/v1development/profiles"
_SAMPLE_KINDS = {"cpu": "cpu", "wall": "wall", "offcpu": "off_cpu"}


def resource_attributes(sink: SinkSettings, run: Run) -> dict[str, str]:
    """OpenTelemetry's Kubernetes semantic conventions for the pod the run was recorded in,
    `service.name` from the app's labels where the pod has them, and the sink's own."""
    meta = run.meta
    values = {"k8s.namespace.name": run.namespace, "k8s.pod.name": run.pod,
              "k8s.pod.uid": meta.get("podUid"),
              "k8s.container.name": meta.get("appContainer"),
              "service.name": meta.get("serviceName"),
              "service.version": meta.get("serviceVersion")}
    return {**sink.labels, **{key: value[:MAX_LABEL_VALUE] for key, value in values.items()
                              if isinstance(value, str) and value}}


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def recording_ns(run: Run, samples: int) -> tuple[int, int]:
    """(start, duration) in nanoseconds, to the microsecond the run was stored with: the
    recording's own duration when the run says it, else as long as its samples took."""
    started = run.started if run.started.tzinfo else run.started.replace(tzinfo=UTC)
    start = (started - _EPOCH) // timedelta(microseconds=1) * 1_000
    duration = run.meta.get("duration")
    if isinstance(duration, int | float) and not isinstance(duration, bool) \
            and 0 < duration <= 86400 * 7:
        return start, round(duration * 1_000_000_000)
    return start, samples * (1_000_000_000 // frequency(run))


def otlp_recording(sink: SinkSettings, run: Run, stacks: Mapping[Stack, int]
                   ) -> otlp.Recording:
    start, duration = recording_ns(run, folded.total(stacks))
    unit = run.meta.get("unit")
    weighted = isinstance(unit, str) and unit in otlp.TIME_UNITS
    kind = run.meta.get("type")
    sample_kind = _SAMPLE_KINDS.get(kind, "cpu") if isinstance(kind, str) else "cpu"
    rate = frequency(run)
    if weighted:  # the same values as the profile, in nanoseconds
        scale = otlp.TIME_UNITS[str(unit)]
        original = pprof.encode({stack: value * scale for stack, value in stacks.items()},
                                sample_type=(sample_kind, "nanoseconds"), time_ns=start,
                                duration_ns=duration, comment=run.id)
    else:
        original = pprof.encode(stacks, period_ns=1_000_000_000 // rate, time_ns=start,
                                duration_ns=duration, comment=run.id)
    attributes = {"sidecar_debug.technique": run.technique, "sidecar_debug.run": run.id}
    schedule = run.meta.get("schedule")
    if isinstance(schedule, str) and schedule:
        attributes["sidecar_debug.schedule"] = schedule[:MAX_LABEL_VALUE]
    return otlp.Recording(
        resource=resource_attributes(sink, run), attributes=attributes,
        profile_id=otlp.profile_id(run.id), time_ns=start, duration_ns=duration,
        frequency=0 if weighted else rate, unit=str(unit) if weighted else "count",
        sample_kind=sample_kind, original_pprof=original)


def otlp_export(sink: SinkSettings, run: Run, stacks: Mapping[Stack, int]) -> Request:
    body = otlp.export_request(stacks, otlp_recording(sink, run, stacks)).SerializeToString()
    if sink.name == "grpc":
        return Request("GRPC", sink.url,
                       {collector.GRPC_VERSION_METADATA: otlp.DEVELOPMENT_VERSION}, body)
    return Request("POST", sink.endpoint(OTLP_PATH),
                   {"Content-Type": "application/x-protobuf",
                    collector.HTTP_VERSION_HEADER: otlp.DEVELOPMENT_VERSION}, body)


BUILDERS = {"pyroscope": pyroscope, "parca": parca, "otlp": otlp_export}
