"""The chart's results service (issue 19): its own Deployment (one replica, Recreate) with the
store on a claim, an existing claim or an emptyDir; TLS from the webhook's certificate machinery
in every certificates mode (never the CA key); the webhook configured to give toolsets the token,
URL and CA; a NetworkPolicy that admits only toolset pods; nothing of it when off."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from tests.chart.helm import FULLNAME, NAMESPACE, Manifest, render, template_error

pytestmark = pytest.mark.chart

ON = ["results.enabled=true"]
RESULTS = f"{FULLNAME}-results"
CONTROLLER = f"{FULLNAME}-controller"


def results_pod(manifest: Manifest) -> dict[str, Any]:
    spec: dict[str, Any] = manifest.one("Deployment", RESULTS)["spec"]["template"]["spec"]
    return spec


def test_one_writer_of_its_own() -> None:
    manifest = render(sets=ON)
    deployment = manifest.one("Deployment", RESULTS)
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    pod = results_pod(manifest)
    assert pod["serviceAccountName"] == RESULTS
    [container] = pod["containers"]
    command = container["command"]
    assert command[:3] == ["sidecar-debug", "results", "service"]
    assert command[command.index("--audience") + 1] == (
        f"sidecar-debug.io/results/{NAMESPACE}/{RESULTS}")
    assert command[command.index("--max-concurrent-runs") + 1] == "2"
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    mount = next(m for m in container["volumeMounts"] if m["name"] == "results")
    assert mount["mountPath"] == "/var/lib/sidecar-debug/results" and not mount.get("readOnly")
    volume = next(v for v in pod["volumes"] if v["name"] == "results")
    assert volume == {"name": "results", "persistentVolumeClaim": {"claimName": RESULTS}}
    claim = manifest.one("PersistentVolumeClaim", RESULTS)
    assert claim["spec"]["resources"]["requests"]["storage"] == "2Gi"
    service = manifest.one("Service", RESULTS)
    assert service["spec"]["ports"] == [{"name": "https", "port": 443, "targetPort": "https",
                                         "protocol": "TCP"}]
    labels = manifest.one("Deployment", RESULTS)["spec"]["template"]["metadata"]["labels"]
    assert all(labels.get(k) == v for k, v in service["spec"]["selector"].items())
    # Not a container of the controller any more: no second store, no split brain.
    controller = manifest.one("Deployment", CONTROLLER)["spec"]["template"]["spec"]
    assert [c["name"] for c in controller["containers"]] == ["controller"]
    assert not any(v["name"] == "results" for v in controller["volumes"])


def test_storage_choices() -> None:
    pod = results_pod(render(sets=[*ON, "results.persistence.enabled=false"]))
    volume = next(v for v in pod["volumes"] if v["name"] == "results")
    assert volume["emptyDir"] == {"sizeLimit": "2Gi"}
    manifest = render(sets=[*ON, "results.persistence.existingClaim=kept-results"])
    assert not manifest.has("PersistentVolumeClaim")
    volume = next(v for v in results_pod(manifest)["volumes"] if v["name"] == "results")
    assert volume["persistentVolumeClaim"]["claimName"] == "kept-results"


def test_self_mode_serves_the_pair_the_webhook_issues_never_its_ca_key() -> None:
    manifest = render(sets=ON)
    tls = next(v for v in results_pod(manifest)["volumes"] if v["name"] == "tls")
    assert tls["secret"]["secretName"] == f"{FULLNAME}-tls"
    assert tls["secret"]["optional"] is True  # until the webhook has issued it
    assert {i["key"]: i["path"] for i in tls["secret"]["items"]} == {
        "results.crt": "tls.crt", "results.key": "tls.key", "ca.crt": "ca.crt"}
    settings = yaml.safe_load(manifest.one("ConfigMap", f"{FULLNAME}-config")["data"][
        "config.yaml"])
    assert settings["resultsServiceName"] == RESULTS
    assert settings["resultsUrl"] == f"https://{RESULTS}.{NAMESPACE}.svc:443"
    assert settings["resultsAudience"] == f"sidecar-debug.io/results/{NAMESPACE}/{RESULTS}"


def test_cert_manager_and_provided_modes() -> None:
    from tests.chart.helm import CHART

    manifest = render([CHART / "ci" / "certmanager-values.yaml"], sets=ON)
    certificate = manifest.one("Certificate", RESULTS)
    assert f"{RESULTS}.{NAMESPACE}.svc" in certificate["spec"]["dnsNames"]
    tls = next(v for v in results_pod(manifest)["volumes"] if v["name"] == "tls")
    assert tls["secret"] == {"secretName": f"{FULLNAME}-results-tls"}
    error = template_error([CHART / "ci" / "provided-values.yaml"], sets=ON)
    assert "results.tls.secretName" in error
    manifest = render([CHART / "ci" / "provided-values.yaml"],
                      sets=[*ON, "results.tls.secretName=my-results-tls"])
    tls = next(v for v in results_pod(manifest)["volumes"] if v["name"] == "tls")
    assert tls["secret"] == {"secretName": "my-results-tls"}


def test_network_policy_admits_only_toolset_pods() -> None:
    policy = render(sets=ON).one("NetworkPolicy", RESULTS)
    assert policy["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == \
        "results"
    [ingress] = policy["spec"]["ingress"]
    assert ingress["ports"] == [{"port": 8443, "protocol": "TCP"}]
    assert ingress["from"] == [{"namespaceSelector": {}, "podSelector": {"matchLabels": {
        "sidecar-debug.io/results-agent": "true"}}}]
    scraped = render(sets=[*ON, "results.metricsFrom[0].namespaceSelector.matchLabels.team=obs"]
                     ).one("NetworkPolicy", RESULTS)
    assert scraped["spec"]["ingress"][1]["ports"] == [{"port": 9090, "protocol": "TCP"}]
    assert not render(sets=[*ON, "networkPolicy.enabled=false"]).has("NetworkPolicy", RESULTS)


def test_readers_role_aggregates_into_view_unless_told_not_to() -> None:
    role = render(sets=ON).one("ClusterRole", f"{FULLNAME}-results-reader")
    assert role["rules"] == [{"apiGroups": ["sidecar-debug.io"], "resources": ["debugresults"],
                              "verbs": ["get"]}]
    assert role["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-view"] == "true"
    own = render(sets=[*ON, "results.readers.aggregateToView=false"]).one(
        "ClusterRole", f"{FULLNAME}-results-reader")
    assert "rbac.authorization.k8s.io/aggregate-to-view" not in own["metadata"]["labels"]


def test_nothing_without_results() -> None:
    manifest = render()
    assert not manifest.has("PersistentVolumeClaim")
    assert not any(obj["metadata"]["name"].startswith(RESULTS) for obj in manifest)
    settings = yaml.safe_load(manifest.one("ConfigMap", f"{FULLNAME}-config")["data"][
        "config.yaml"])
    assert not any(key.startswith("results") for key in settings)


def test_bad_values_are_refused_by_the_schema() -> None:
    assert "maxAge" in template_error(sets=[*ON, "results.retention.maxAge=soon"])
    assert "tokenExpirationSeconds" in template_error(
        sets=[*ON, "results.tokenExpirationSeconds=60"])
    assert "allowExec" in template_error(sets=["controller.allowExec=true"])  # gone for good


def test_retention_values_reach_the_service() -> None:
    pod = results_pod(render(sets=[*ON, "results.retention.count=7",
                                   "results.retention.maxAge=12h"]))
    env = {e["name"]: e.get("value") for e in pod["containers"][0].get("env", [])}
    assert env == {"SIDECAR_DEBUG_RESULTS_KEEP": "7", "SIDECAR_DEBUG_RESULTS_MAX_AGE": "12h",
                   "SIDECAR_DEBUG_RESULTS_NAMESPACE_QUOTA": "25%"}


def test_the_namespace_quota_reaches_the_service_and_is_checked() -> None:
    for value, expected in (("500Mi", "500Mi"), ("10%", "10%"), ("0", "0")):
        pod = results_pod(render(sets=[*ON, f"results.quotaPerNamespace={value}"]))
        env = {e["name"]: e.get("value") for e in pod["containers"][0].get("env", [])}
        assert env["SIDECAR_DEBUG_RESULTS_NAMESPACE_QUOTA"] == expected
    for bad in ("lots", "25 %", "1.5Gi", "-1"):
        assert "quotaPerNamespace" in template_error(
            sets=[*ON, f"results.quotaPerNamespace={bad}"]), bad
