"""`attach` against a fake API: the settings come from the installed chart's ConfigMaps (never a
built-in image), the body fits the cluster's version, and a refusal says how to fix it."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
import yaml
from kubernetes.client.exceptions import ApiException

from webhook.kube import client as kube
from webhook.sessions import session as sessions
from webhook.sessions.settings import SettingsNotFound, find_settings
from webhook.wire import constants, exits

IMAGE = "registry.local/team/toolset:2.0"
CONFIGURATIONS = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"
CUSTOM_PROFILES = {
    "apiVersion": "sidecar-debug.io/v1alpha1", "kind": "ProfileSet",
    "profiles": [
        {"name": "tracing", "techniques": ["lttng"], "securityContext": {"runAsUser": 0},
         "sharedVolumes": [{"name": "sidecar-debug-lttng", "mountPath": "/var/run/lttng"}]},
        {"name": "root", "techniques": ["perf", "lttng", "bcc"],
         "securityContext": {"privileged": True}},
    ],
}


def config_map(name: str, data: dict[str, Any], annotations: dict[str, str] | None = None,
               ) -> dict[str, Any]:
    return {"metadata": {"name": name, "annotations": annotations or {}},
            "data": {key: yaml.safe_dump(value) for key, value in data.items()}}


def error(status: int, message: str = "") -> ApiException:
    failure = ApiException(status=status, reason={403: "Forbidden", 404: "Not Found"}.get(
        status, "Error"))
    failure.body = json.dumps({"message": message or f"HTTP {status}"})
    return failure


class FakeAPI:
    """kube.request over a table of GET paths; records every call."""

    def __init__(self, routes: dict[str, Any]) -> None:
        self.routes = routes
        self.calls: list[tuple[str, str, Any]] = []

    def __call__(self, api_client: Any, method: str, path: str, body: Any,
                 content_type: str | None) -> Any:
        self.calls.append((method, path, body))
        answer = self.routes.get(f"{method} {path}", self.routes.get(path, error(404)))
        if isinstance(answer, Exception):
            raise answer
        return answer


def chart_routes(namespace: str = "tools", release: str = "dbg") -> dict[str, Any]:
    """What a chart installed as `dbg` in namespace `tools` exposes, with custom profiles."""
    settings_name, profiles_name = f"{release}-config", f"{release}-profiles"
    return {
        f"GET {CONFIGURATIONS}?labelSelector={constants.LABEL_PART_OF}={constants.PRODUCT}": {
            "items": [{"metadata": {"name": release, "annotations": {
                constants.ANNOTATION_SETTINGS: f"{namespace}/{settings_name}"}}}]},
        f"GET /api/v1/namespaces/{namespace}/configmaps/{settings_name}": config_map(
            settings_name,
            {constants.SETTINGS_KEY: {
                "toolsetImage": IMAGE, "imagePullPolicy": "Always", "defaultProfile": "root",
                "profilesFile": "/etc/sidecar-debug/profiles/profiles.yaml",
                "someFutureSetting": True}},
            {constants.ANNOTATION_PROFILES_CONFIGMAP: profiles_name}),
        f"GET /api/v1/namespaces/{namespace}/configmaps/{profiles_name}": config_map(
            profiles_name, {constants.PROFILES_KEY: CUSTOM_PROFILES}),
    }


def test_settings_are_found_through_the_webhook_configuration(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(kube, "request", FakeAPI(chart_routes()))
    installed = find_settings(None, environ={})
    assert installed.settings.toolset_image == IMAGE
    assert installed.settings.image_pull_policy == "Always"
    assert sorted(installed.settings.profiles) == ["root", "tracing"]
    assert installed.source == "ConfigMap tools/dbg-config"


def test_settings_reference_from_flag_or_environment_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    api = FakeAPI(chart_routes(namespace="other", release="x"))
    monkeypatch.setattr(kube, "request", api)
    assert find_settings(None, "other/x-config", environ={}).settings.toolset_image == IMAGE
    assert find_settings(None, environ={constants.ENV_SETTINGS_CONFIGMAP: "other/x-config"})
    assert not any(CONFIGURATIONS in path for _, path, _ in api.calls)


def test_users_who_may_not_list_configurations_get_the_default_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    routes = chart_routes(namespace=constants.PRODUCT, release=constants.PRODUCT)
    for key in [k for k in routes if CONFIGURATIONS in k]:
        routes[key] = error(403)
    monkeypatch.setattr(kube, "request", FakeAPI(routes))
    assert find_settings(None, environ={}).settings.toolset_image == IMAGE


@pytest.mark.parametrize(("status", "why"), [(403, "you may not read it"),
                                             (404, "it does not exist")])
def test_unreadable_settings_say_how_to_point_at_them(
    monkeypatch: pytest.MonkeyPatch, status: int, why: str,
) -> None:
    monkeypatch.setattr(kube, "request", FakeAPI({
        "GET /api/v1/namespaces/tools/configmaps/dbg-config": error(status)}))
    with pytest.raises(SettingsNotFound) as raised:
        find_settings(None, "tools/dbg-config", environ={})
    text = str(raised.value)
    assert why in text and "--settings-configmap NAMESPACE/NAME" in text and "--image" in text


def test_several_installations_must_be_chosen(monkeypatch: pytest.MonkeyPatch) -> None:
    routes = chart_routes()
    key = next(k for k in routes if CONFIGURATIONS in k)
    routes[key] = {"items": [
        {"metadata": {"annotations": {constants.ANNOTATION_SETTINGS: "a/one-config"}}},
        {"metadata": {"annotations": {constants.ANNOTATION_SETTINGS: "b/two-config"}}}]}
    monkeypatch.setattr(kube, "request", FakeAPI(routes))
    with pytest.raises(SettingsNotFound) as raised:
        find_settings(None, environ={})
    assert "a/one-config, b/two-config" in str(raised.value)


# --- attach ------------------------------------------------------------------------------------


class PodSession(sessions.Session):
    def __init__(self, pod: dict[str, Any], **kw: Any) -> None:
        self.stderr = io.StringIO()  # what the session writes to err, typed as the StringIO
        super().__init__(api_client=None, pod="web", namespace="shop", err=self.stderr, **kw)
        self.manifest = pod

    def read_pod(self) -> dict[str, Any]:
        return self.manifest


STANDBY_POD = {
    "metadata": {"name": "web", "namespace": "shop"},
    "spec": {
        "containers": [{"name": "app", "image": "shop/web:1",
                        "volumeMounts": [{"name": "sidecar-debug-lttng",
                                          "mountPath": "/var/run/lttng"}]}],
        "volumes": [{"name": "sidecar-debug-lttng", "emptyDir": {}}],
    },
}
EPHEMERAL = "/api/v1/namespaces/shop/pods/web/ephemeralcontainers"


def test_attach_on_1_20_puts_an_ephemeralcontainers_object_from_the_settings(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    routes = chart_routes()
    routes[f"GET {EPHEMERAL}"] = {"kind": "EphemeralContainers", "metadata": {"name": "web"},
                                  "ephemeralContainers": []}
    routes[f"PUT {EPHEMERAL}"] = {}
    api = FakeAPI(routes)
    monkeypatch.setattr(kube, "request", api)
    session = PodSession(STANDBY_POD)
    assert sessions.attach(session, profile_name="root", wait_seconds=0, minor=20) == 0
    method, _, body = api.calls[-1]
    assert method == "PUT" and body["kind"] == "EphemeralContainers"
    (container,) = body["ephemeralContainers"]
    assert container["image"] == IMAGE and "ghcr.io" not in json.dumps(body)
    assert container["imagePullPolicy"] == "Always"
    assert "securityContext" not in container  # forbidden before 1.23
    assert container["volumeMounts"] == [{"name": "sidecar-debug-lttng",
                                          "mountPath": "/var/run/lttng"}]
    assert {"name": constants.ENV_PROFILE, "value": "root"} in container["env"]
    assert capsys.readouterr().out.splitlines()[0] == container["name"]
    assert "forbids a securityContext" in session.stderr.getvalue()


def test_attach_on_1_23_patches_the_pod_with_the_profiles_security_context(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    routes = chart_routes()
    routes[f"PATCH {EPHEMERAL}"] = {}
    api = FakeAPI(routes)
    monkeypatch.setattr(kube, "request", api)
    assert sessions.attach(PodSession(STANDBY_POD), profile_name="root", wait_seconds=0,
                           minor=23) == 0
    method, _, body = api.calls[-1]
    assert method == "PATCH"
    (container,) = body["spec"]["ephemeralContainers"]
    assert container["securityContext"] == {"privileged": True}


def test_attach_without_settings_and_without_image_says_how_to_fix_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(kube, "request", FakeAPI({}))
    with pytest.raises(sessions.SessionError) as raised:
        sessions.attach(PodSession(STANDBY_POD), wait_seconds=0, minor=20)
    assert raised.value.code == exits.EXIT_USAGE
    assert "--settings-configmap" in str(raised.value) and "--image" in str(raised.value)


def test_attach_with_only_an_image_uses_the_built_in_profiles(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    routes: dict[str, Any] = {f"GET {EPHEMERAL}": {"ephemeralContainers": []},
                              f"PUT {EPHEMERAL}": {}}
    api = FakeAPI(routes)
    monkeypatch.setattr(kube, "request", api)
    session = PodSession(STANDBY_POD, image="localhost/toolset:1")
    assert sessions.attach(session, wait_seconds=0, minor=20) == 0
    (container,) = api.calls[-1][2]["ephemeralContainers"]
    assert container["image"] == "localhost/toolset:1"
    assert {"name": constants.ENV_PROFILE, "value": "lttng"} in container["env"]


def test_attach_with_an_unknown_profile_lists_the_installed_ones(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(kube, "request", FakeAPI(chart_routes()))
    with pytest.raises(sessions.SessionError) as raised:
        sessions.attach(PodSession(STANDBY_POD), profile_name="full", wait_seconds=0, minor=20)
    assert raised.value.code == exits.EXIT_USAGE
    assert "installed profiles: root, tracing" in str(raised.value)


def test_a_webhook_denial_reaches_the_user_with_its_rolebinding(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    denial = ('admission webhook "namespace.sidecar-debug.io" denied the request: sidecar-debug '
              "denied ... To grant it: kubectl create rolebinding sidecar-debug-root-alice "
              "--clusterrole=dbg-profile-root --user=alice -n shop")
    routes = chart_routes()
    routes[f"GET {EPHEMERAL}"] = {"ephemeralContainers": []}
    routes[f"PUT {EPHEMERAL}"] = error(403, denial)
    monkeypatch.setattr(kube, "request", FakeAPI(routes))
    with pytest.raises(sessions.SessionError) as raised:
        sessions.attach(PodSession(STANDBY_POD), profile_name="root", wait_seconds=0, minor=20)
    assert raised.value.code == exits.EXIT_API
    assert "kubectl create rolebinding sidecar-debug-root-alice" in str(raised.value)
