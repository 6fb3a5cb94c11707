"""The requests a stored run becomes, one per sink (pure: no I/O, no clock).

Grafana Pyroscope: `POST /ingest?name=APP.cpu{labels}&from=&until=&format=folded&sampleRate=
&spyName=&units=samples&aggregationType=sum` with the folded stacks as the body (the HTTP API
of Pyroscope 0.37 that Grafana Pyroscope 1.x keeps: pkg/ingester/pyroscope/ingest_handler.go).
`.cpu` makes it a process_cpu profile whose samples Pyroscope scales by 1/sampleRate seconds.

Parca: `POST /profiles/writeraw` with the gRPC-gateway JSON form of parca.profilestore.v1alpha1
WriteRawRequest (proto/parca/profilestore/v1alpha1/profilestore.proto): one series, labels
`__name__` + ours, one sample whose `rawProfile` is the gzip'd pprof, base64 as proto3's JSON
mapping writes bytes. Parca validates label names as Prometheus does and the pprof's ids as
sequential (pkg/parcacol ValidatePprofProfile); webhook.results.formats.pprof writes them so.
"""

from __future__ import annotations

import base64
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from webhook.results import folded, formats
from webhook.results.export.settings import SinkSettings
from webhook.results.store import Run

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


def pyroscope(sink: SinkSettings, run: Run, stacks: Mapping[folded.Stack, int]) -> Request:
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


def parca(sink: SinkSettings, run: Run, stacks: Mapping[folded.Stack, int]) -> Request:
    start, until = window(run, folded.total(stacks))
    profile = formats.pprof(stacks, period_ns=1_000_000_000 // frequency(run),
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


BUILDERS = {"pyroscope": pyroscope, "parca": parca}
