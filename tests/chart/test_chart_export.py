"""The chart's export settings (docs/exports.md): results.export reaches the container that stores
runs as the JSON the Python side parses, each sink's Secret is mounted read-only where it reads
credentials, and the schema refuses what the Python side would refuse; nothing without a url."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.chart.helm import Manifest, render, template_error
from webhook.results.export.settings import (
    ENV_EXPORT,
    SECRETS_ROOT,
    ExportSettings,
    ExportSettingsError,
)

pytestmark = pytest.mark.chart

ON = ["results.enabled=true"]
SINKS = [*ON, "results.export.pyroscope.url=https://profiles.example:443/p",
         "results.export.pyroscope.existingSecret=pyroscope-creds",
         "results.export.pyroscope.labels.cluster=prod",
         "results.export.parca.url=http://parca.parca:7070"]


def containers(manifest: Manifest) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(pod spec, container) of every Deployment's containers."""
    pods = [deployment["spec"]["template"]["spec"] for deployment in manifest.all("Deployment")]
    return [(pod, container) for pod in pods for container in pod["containers"]]


def exporting(manifest: Manifest) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(pod spec, container) of every container that gets SIDECAR_DEBUG_EXPORT."""
    return [(pod, container) for pod, container in containers(manifest)
            if any(e["name"] == ENV_EXPORT for e in container.get("env", []))]


def test_nothing_without_a_sink_url() -> None:
    for sets in (ON, [*ON, "results.export.pyroscope.existingSecret=creds"]):
        manifest = render(sets=sets)
        assert exporting(manifest) == []
        assert not any(v["name"].startswith("export-") for pod, _ in containers(manifest)
                       for v in pod.get("volumes", []))


def test_the_storing_container_gets_the_settings_and_the_secrets() -> None:
    [(pod, container)] = exporting(render(sets=SINKS))
    assert container["command"][:3] == ["sidecar-debug", "results", "service"]  # the writer
    value = next(e["value"] for e in container["env"] if e["name"] == ENV_EXPORT)
    settings = ExportSettings.from_environ({ENV_EXPORT: value})  # the Python side accepts it
    sinks = {sink.kind: sink for sink in settings.sinks}
    assert sinks["pyroscope"].url == "https://profiles.example:443/p"
    assert sinks["pyroscope"].secret_dir == SECRETS_ROOT / "pyroscope"
    assert sinks["pyroscope"].labels == {"cluster": "prod"}
    assert sinks["pyroscope"].name == "sidecar-debug" and sinks["parca"].name == "process_cpu"
    assert sinks["parca"].secret_dir is None
    assert (settings.queue_size, settings.attempts, settings.backoff) == (100, 5, 2.0)
    assert sinks["parca"].timeout == 10.0
    mounts = [m for m in container["volumeMounts"] if m["name"].startswith("export-")]
    assert mounts == [{"name": "export-pyroscope", "mountPath": str(SECRETS_ROOT / "pyroscope"),
                       "readOnly": True}]
    volumes = [v for v in pod["volumes"] if v["name"].startswith("export-")]
    assert volumes == [{"name": "export-pyroscope", "secret": {"secretName": "pyroscope-creds"}}]


def test_the_defaults_are_the_python_defaults() -> None:
    import yaml

    values = yaml.safe_load((Path(__file__).resolve().parents[2] / "charts" / "sidecar-debug"
                             / "values.yaml").read_text())
    export = values["results"]["export"]
    export["parca"]["url"] = "http://parca:7070"
    settings = ExportSettings.from_mapping(export)
    assert settings == ExportSettings(sinks=settings.sinks)  # queue, attempts, backoff
    assert settings.sinks[0].timeout == 10.0 and settings.sinks[0].name == "process_cpu"
    assert json.loads(json.dumps(export))  # plain JSON, as the template passes it


@pytest.mark.parametrize(("value", "field"), [
    ("results.export.pyroscope.url=ftp://x", "url"),
    ("results.export.pyroscope.url=http://user:pw@x", "url"),
    ("results.export.parca.labels.pod=x", "pod"),
    ("results.export.parca.labels.cluster-name=x", "cluster-name"),
    ("results.export.parca.profileName=process-cpu", "profileName"),
    ("results.export.pyroscope.applicationName=a{b}", "applicationName"),
    ("results.export.queueSize=0", "queueSize"),
    ("results.export.pyroscope.tenant=a", "tenant"),
    ("results.export.parca.existingSecret=Not_A_Name", "existingSecret"),
])
def test_the_schema_refuses_what_the_exporter_would(value: str, field: str) -> None:
    assert field in template_error(sets=[*ON, value])


def test_the_results_network_policy_lets_exports_out() -> None:
    """The results service's egress is the API and DNS; a sink's URL port is added (to
    egressTo when given), or every export would time out under an enforcing network plugin."""
    def egress(manifest: Manifest) -> list[dict[str, Any]]:
        policies = [p for p in manifest.all("NetworkPolicy")
                    if p["metadata"]["name"].endswith("-results")]
        assert len(policies) == 1
        return list(policies[0]["spec"]["egress"])

    plain = egress(render(sets=ON))
    rules = egress(render(sets=SINKS))
    assert rules[:len(plain)] == plain
    assert rules[len(plain):] == [{"ports": [{"port": 443, "protocol": "TCP"},
                                             {"port": 7070, "protocol": "TCP"}]}]
    peer = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
    scoped = egress(render(sets=[
        *ON, "results.export.pyroscope.url=http://pyroscope.monitoring:4040",
        "results.export.egressTo[0].namespaceSelector.matchLabels.kubernetes\\.io/metadata\\.name"
        "=monitoring"]))
    assert scoped[len(plain):] == [{"ports": [{"port": 4040, "protocol": "TCP"}], "to": [peer]}]


def test_an_otlp_sink_gets_its_settings_secret_and_port() -> None:
    manifest = render(sets=[*ON, "results.export.otlp.url=http://otel-collector.monitoring:4318",
                            "results.export.otlp.existingSecret=otel-creds",
                            "results.export.otlp.resourceAttributes.deployment\\.environment"
                            "\\.name=prod"])
    [(pod, container)] = exporting(manifest)
    value = next(e["value"] for e in container["env"] if e["name"] == ENV_EXPORT)
    [sink] = ExportSettings.from_environ({ENV_EXPORT: value}).sinks
    assert (sink.kind, sink.url, sink.name) == (
        "otlp", "http://otel-collector.monitoring:4318", "http/protobuf")
    assert sink.labels == {"deployment.environment.name": "prod"}
    assert sink.secret_dir == SECRETS_ROOT / "otlp"
    assert [v for v in pod["volumes"] if v["name"].startswith("export-")] == [
        {"name": "export-otlp", "secret": {"secretName": "otel-creds"}}]
    [policy] = [p for p in manifest.all("NetworkPolicy")
                if p["metadata"]["name"].endswith("-results")]
    assert {"ports": [{"port": 4318, "protocol": "TCP"}]} in policy["spec"]["egress"]


@pytest.mark.parametrize(("value", "field"), [
    ("results.export.otlp.resourceAttributes.k8s\\.pod\\.uid=x", "k8s.pod.uid"),
    ("results.export.otlp.resourceAttributes.k8s\\.pod\\.name=x", "k8s.pod.name"),
])
def test_the_schema_refuses_what_the_otlp_exporter_would(value: str, field: str) -> None:
    assert field in template_error(sets=[*ON, "results.export.otlp.url=http://c:4318", value])


def test_an_otlp_grpc_sink_gets_its_protocol_and_port() -> None:
    manifest = render(sets=[*ON, "results.export.otlp.url=https://otel-collector.monitoring:4317",
                            "results.export.otlp.protocol=grpc",
                            "results.export.otlp.existingSecret=otel-creds"])
    [(pod, container)] = exporting(manifest)
    value = next(e["value"] for e in container["env"] if e["name"] == ENV_EXPORT)
    [sink] = ExportSettings.from_environ({ENV_EXPORT: value}).sinks
    assert (sink.kind, sink.url, sink.name) == (
        "otlp", "https://otel-collector.monitoring:4317", "grpc")
    assert sink.secret_dir == SECRETS_ROOT / "otlp"
    assert {"name": "export-otlp", "mountPath": "/etc/sidecar-debug/export/otlp",
            "readOnly": True} in container["volumeMounts"]
    [policy] = [p for p in manifest.all("NetworkPolicy")
                if p["metadata"]["name"].endswith("-results")]
    assert {"ports": [{"port": 4317, "protocol": "TCP"}]} in policy["spec"]["egress"]


@pytest.mark.parametrize(("sets", "field"), [
    (["results.export.otlp.url=https://c:4317/v1development", "results.export.otlp.protocol=grpc"],
     "url"),
    (["results.export.otlp.url=http://c:4317", "results.export.otlp.protocol=grpc/json"],
     "protocol"),
    (["results.export.otlp.url=http://c:4318",
      "results.export.otlp.resourceAttributes.service\\.version=x"], "service.version"),
])
def test_the_schema_refuses_what_the_grpc_exporter_would(sets: list[str], field: str) -> None:
    assert field in template_error(sets=[*ON, *sets])
    with pytest.raises(ExportSettingsError):
        ExportSettings.from_mapping(_export_values(sets))


def _export_values(sets: list[str]) -> dict[str, Any]:
    """The --set values under results.export as the mapping the Python side parses."""
    otlp: dict[str, Any] = {}
    for item in sets:
        key, _, value = item.partition("=")
        path = key.replace("\\.", "\0").split(".")[3:]
        target = otlp
        for part in path[:-1]:
            target = target.setdefault(part.replace("\0", "."), {})
        target[path[-1].replace("\0", ".")] = value
    return {"otlp": otlp}
