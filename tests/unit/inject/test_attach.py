"""The ephemeral toolset container `attach` adds: built from the settings, mounting only the
pod's shared emptyDirs (a standby or injected pod's), marked as ours."""

from __future__ import annotations

from typing import Any

import pytest

from webhook.config import Settings, load_settings
from webhook.guard.privilege import privilege_reasons, requires_grant, strongest_unprivileged
from webhook.inject.attach import (
    build_attach_container,
    default_target,
    env_value,
    is_attached,
)
from webhook.wire import constants

IMAGE = "registry.local/team/toolset:2.0"


@pytest.fixture
def settings() -> Settings:
    return load_settings(environ={"SIDECAR_DEBUG_TOOLSET_IMAGE": IMAGE})


def standby_pod(**spec: Any) -> dict[str, Any]:
    """What standby mode leaves in a pod: the shared emptyDirs in the app, no toolset."""
    return {
        "metadata": {"name": "web", "namespace": "shop"},
        "spec": {
            "shareProcessNamespace": True,
            "containers": [{
                "name": "app", "image": "shop/web:1",
                "volumeMounts": [
                    {"name": "sidecar-debug-tmp", "mountPath": "/tmp/"},
                    {"name": "sidecar-debug-lttng", "mountPath": "/var/run/lttng"},
                    {"name": "token", "mountPath": "/var/run/secrets/x", "readOnly": True},
                ],
            }],
            "volumes": [
                {"name": "sidecar-debug-tmp", "emptyDir": {}},
                {"name": "sidecar-debug-lttng", "emptyDir": {}},
                {"name": "token", "secret": {"secretName": "t"}},
            ],
            **spec,
        },
    }


def build(pod: dict[str, Any], settings: Settings, profile: str | None,
          **kw: Any) -> dict[str, Any]:
    chosen = settings.profiles[profile] if profile else None
    return build_attach_container(pod, settings, chosen, name="debug-toolset-abc123",
                                  target="app", **kw)


def test_container_comes_from_the_settings_not_a_built_in_image(settings: Settings) -> None:
    container = build(standby_pod(), settings, "perf")
    assert container["image"] == IMAGE
    assert container["imagePullPolicy"] == settings.image_pull_policy
    assert container["command"] == list(settings.sidecar_command)
    assert container["targetContainerName"] == "app"
    assert env_value(container, constants.ENV_PROFILE) == "perf"
    assert env_value(container, constants.ENV_TECHNIQUES) == "perf"
    assert is_attached(container)
    # Nothing the API refuses on an ephemeral container.
    assert not {"resources", "ports", "lifecycle", "startupProbe", "readinessProbe"} & set(
        container)


def test_standby_pods_shared_volumes_are_mounted_at_the_same_paths(settings: Settings) -> None:
    mounts = build(standby_pod(), settings, "lttng")["volumeMounts"]
    assert sorted(mounts, key=lambda m: m["mountPath"]) == [
        {"name": "sidecar-debug-tmp", "mountPath": "/tmp"},
        {"name": "sidecar-debug-lttng", "mountPath": "/var/run/lttng"},
    ]


def test_only_emptydirs_are_mounted(settings: Settings) -> None:
    """An app that mounts a hostPath at /tmp must not hand it to the toolset."""
    pod = standby_pod(volumes=[
        {"name": "sidecar-debug-tmp", "hostPath": {"path": "/"}},
        {"name": "sidecar-debug-lttng", "emptyDir": {}},
    ])
    mounts = build(pod, settings, "perf")["volumeMounts"]
    assert mounts == [{"name": "sidecar-debug-lttng", "mountPath": "/var/run/lttng"}]
    assert not privilege_reasons({}, [])


def test_a_pod_without_shared_volumes_gets_no_mounts(settings: Settings) -> None:
    pod = {"metadata": {}, "spec": {"containers": [{"name": "app", "image": "x"}]}}
    assert "volumeMounts" not in build(pod, settings, "perf")


def test_a_bcc_profile_reuses_the_pods_header_hostpaths_read_only(settings: Settings) -> None:
    pod = standby_pod()
    pod["spec"]["volumes"].append({"name": "sidecar-debug-lib-modules",
                                   "hostPath": {"path": "/lib/modules", "type": ""}})
    mounts = build(pod, settings, "bcc")["volumeMounts"]
    assert {"name": "sidecar-debug-lib-modules", "mountPath": "/lib/modules",
            "readOnly": True} in mounts
    assert "/lib/modules" not in {m["mountPath"] for m in build(pod, settings, "lttng")[
        "volumeMounts"]}


def test_security_context_only_where_the_cluster_allows_it(settings: Settings) -> None:
    with_context = build(standby_pod(), settings, "full")
    assert with_context["securityContext"]["privileged"] is True
    without = build(standby_pod(), settings, "full", with_security_context=False)
    assert "securityContext" not in without
    assert env_value(without, constants.ENV_PROFILE) == "full"  # the gate still sees the ask
    # A copy: the settings' profile must not be changed through the container.
    with_context["securityContext"]["privileged"] = False
    assert settings.profiles["full"].security_context["privileged"] is True


def test_default_profile_needs_no_grant(settings: Settings) -> None:
    profile = strongest_unprivileged(settings.profiles.values())
    assert profile is not None and profile.name == "lttng" and not requires_grant(profile)
    container = build_attach_container(standby_pod(), settings, None, name="debug-toolset-x",
                                       target="app")
    assert env_value(container, constants.ENV_PROFILE) is None and is_attached(container)


def test_default_target_skips_the_injected_sidecar(settings: Settings) -> None:
    pod = standby_pod()
    pod["spec"]["containers"].insert(0, {"name": settings.sidecar_name, "image": IMAGE})
    assert default_target(pod, settings) == "app"


@pytest.mark.parametrize("container", [
    {"name": "debug-toolset-x"},
    {"name": "other", "env": [{"name": constants.ENV_ATTACHED, "value": "true"}]},
    {"name": "debug-toolset-x", "env": [{"name": constants.ENV_ATTACHED, "valueFrom": {}}]},
    {"name": "debug-toolset-x", "env": "not-a-list"},
    "not-a-container",
])
def test_marker_needs_prefix_and_literal_env(container: Any) -> None:
    assert not is_attached(container)
