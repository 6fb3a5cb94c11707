"""With the results service configured, the webhook gives the injected toolset (and only it) a
projected token bound to the pod and the service's audience, the service's URL and the CA read
from where the webhook serves from, and labels the pod for the service's NetworkPolicy. No CA
readable: no wiring, and a warning. Standby pods and offline inject get none."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from tests.unit.core_helpers import injected, settings_with, validate_pod
from webhook.certs import pki
from webhook.certs.tls import write_bundle
from webhook.wire import constants

URL = "https://sd-results.sidecar-debug.svc:443"
AUDIENCE = "sidecar-debug.io/results/sidecar-debug/sd-results"


def pod(**metadata: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", **metadata},
            "spec": {"containers": [{"name": "app", "image": "busybox"}]}}


def configured(tmp_path: Path, **extra: Any) -> Any:
    ca = pki.generate_ca()
    files = write_bundle(tmp_path, ca, pki.generate_serving(ca, ["sd.sidecar-debug.svc"]))
    return settings_with(results_url=URL, results_audience=AUDIENCE,
                         tls_cert_file=str(files["tls.crt"]), tls_key_file=str(files["tls.key"]),
                         **extra), files["ca.crt"].read_text()


def test_the_toolset_alone_gets_the_token_url_and_ca(tmp_path: Path) -> None:
    settings, ca = configured(tmp_path)
    original = pod(labels={"app": "web"})
    before = copy.deepcopy(original)
    result, response = injected(original, settings=settings)
    assert original == before  # the review's object is never written to
    validate_pod(result)
    spec = result["spec"]
    [volume] = [v for v in spec["volumes"] if "projected" in v]
    assert volume["name"] == constants.RESULTS_TOKEN_VOLUME
    assert volume["projected"]["sources"] == [{"serviceAccountToken": {
        "audience": AUDIENCE, "expirationSeconds": 3600, "path": "token"}}]
    sidecar, app = spec["containers"]
    assert {"name": constants.RESULTS_TOKEN_VOLUME, "mountPath": constants.RESULTS_TOKEN_DIR,
            "readOnly": True} in sidecar["volumeMounts"]
    assert all(m["name"] != constants.RESULTS_TOKEN_VOLUME for m in app.get("volumeMounts", []))
    env = {e["name"]: e for e in sidecar["env"]}
    assert env[constants.ENV_RESULTS_URL]["value"] == URL
    assert env[constants.ENV_RESULTS_CA]["value"] == ca
    assert env[constants.ENV_POD_NAME]["valueFrom"] == {
        "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}
    assert constants.ENV_RESULTS_URL not in {e["name"] for e in app.get("env", [])}
    assert result["metadata"]["labels"] == {"app": "web",
                                            constants.LABEL_RESULTS_AGENT: "true"}
    assert not response.get("warnings")


def test_no_ca_yet_means_no_wiring_and_a_warning(tmp_path: Path) -> None:
    settings = settings_with(results_url=URL, results_audience=AUDIENCE,
                             results_ca_file=str(tmp_path / "missing.crt"))
    result, response = injected(pod(), settings=settings)
    assert not any("projected" in v for v in result["spec"].get("volumes", []))
    assert "cannot push scheduled runs" in " ".join(response.get("warnings", []))
    (tmp_path / "garbage.crt").write_text("not a certificate")
    settings = settings_with(results_url=URL, results_audience=AUDIENCE,
                             results_ca_file=str(tmp_path / "garbage.crt"))
    result, _ = injected(pod(), settings=settings)
    assert constants.LABEL_RESULTS_AGENT not in result["metadata"].get("labels", {})


def test_without_the_service_and_in_standby_nothing_changes(tmp_path: Path) -> None:
    plain, _ = injected(pod())
    assert not any("projected" in v for v in plain["spec"].get("volumes", []))
    settings, _ = configured(tmp_path)
    standby, _ = injected(pod(annotations={constants.ANNOTATION_MODE: "standby"}),
                          settings=settings)
    assert not any("projected" in v for v in standby["spec"].get("volumes", []))
    assert constants.LABEL_RESULTS_AGENT not in standby["metadata"].get("labels", {})


def test_a_volume_name_taken_by_the_app_is_not_reused(tmp_path: Path) -> None:
    settings, _ = configured(tmp_path)
    taken = pod()
    taken["spec"]["containers"][0]["volumeMounts"] = [
        {"name": constants.RESULTS_TOKEN_VOLUME, "mountPath": "/x"}]
    result, _ = injected(taken, settings=settings)
    [volume] = [v for v in result["spec"]["volumes"] if "projected" in v]
    assert volume["name"] == f"{constants.RESULTS_TOKEN_VOLUME}-2"


def test_the_guard_verifies_the_wired_toolset_and_refuses_a_forged_token_mount(
        tmp_path: Path) -> None:
    """webhook.guard.toolset rebuilds what the injector builds: the results wiring is part of
    it, and a token for another audience (or another CA shape) under our mount is not."""
    from tests.unit.guard.test_toolset import as_admitted
    from webhook.guard.toolset import verify_toolsets

    settings, _ = configured(tmp_path)
    result, _ = injected(pod(), settings=settings)
    admitted = as_admitted(result)
    report = verify_toolsets(admitted, settings)
    assert [t.container.name for t in report.toolsets] == ["debug-toolset"]
    assert report.violations == ()

    other_audience = copy.deepcopy(admitted)
    [volume] = [v for v in other_audience["spec"]["volumes"]
                if v["name"] == constants.RESULTS_TOKEN_VOLUME]
    volume["projected"]["sources"][0]["serviceAccountToken"]["audience"] = "kubernetes"
    assert verify_toolsets(other_audience, settings).toolsets == ()

    bad_ca = copy.deepcopy(admitted)
    for item in bad_ca["spec"]["containers"][0]["env"]:
        if item["name"] == constants.ENV_RESULTS_CA:
            item["value"] = "not a certificate"
    assert verify_toolsets(bad_ca, settings).toolsets == ()
    # Without the results service configured, the same mount is not ours.
    assert verify_toolsets(admitted, settings_with()).toolsets == ()
