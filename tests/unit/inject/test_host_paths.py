"""The node's directories we mount stay read-only and in the sidecar (issue 12, item 2).

A volume we add under a name some app container already mounts (even without declaring it: a
dangling mount the apiserver would otherwise reject) would be bound to that container too: the
node's /lib/modules, writable, in the app. So the names we add avoid every name used by any
volume and any volumeMount or volumeDevice of every kind of container.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.unit.core_helpers import admission_review, default_settings, mutator
from webhook.admission.review import decode_patch
from webhook.inject.patch import apply_patch
from webhook.inject.sidecar import InjectionPlan, inject_pod
from webhook.wire import constants

SETTINGS = default_settings()
PROFILES = sorted(SETTINGS.profiles)
# The names the built-in profiles give the volumes they add, and their -2, -3 variants.
OURS = sorted(
    {v.name for p in SETTINGS.profiles.values() for v in p.shared_volumes}
    | {v.name for p in SETTINGS.profiles.values() for v in p.host_paths}
)
NAMES = [*OURS, *(f"{n}-2" for n in OURS), "data", "cache"]
PATHS = ["/tmp", "/var/run/lttng", "/lib/modules", "/usr/src", "/data", "/host"]
CONTAINER_KINDS = ("containers", "initContainers", "ephemeralContainers")


def _added_host_volumes(before: dict[str, Any], after: dict[str, Any]) -> set[str]:
    old = {v["name"] for v in before["spec"].get("volumes", [])}
    return {
        v["name"]
        for v in after["spec"].get("volumes", [])
        if "hostPath" in v and v["name"] not in old
    }


def _mounts(pod: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(container name, mount or device) for every container of every kind."""
    return [
        (c["name"], m)
        for kind in CONTAINER_KINDS
        for c in pod["spec"].get(kind, [])
        for m in c.get("volumeMounts", []) + c.get("volumeDevices", [])
    ]


def _sidecar(pod: dict[str, Any]) -> str:
    return str(json.loads(pod["metadata"]["annotations"][constants.ANNOTATION_STATUS])["container"])


def test_a_dangling_mount_named_like_ours_never_gets_the_host_path() -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {
            "containers": [
                {
                    "name": "app",
                    "image": "busybox",
                    # Not declared in spec.volumes: today this is bound to our hostPath.
                    "volumeMounts": [
                        {"name": "sidecar-debug-lib-modules", "mountPath": "/host-modules"}
                    ],
                }
            ]
        },
    }
    review = mutator().review(admission_review(pod))
    result = apply_patch(pod, decode_patch(review))
    host = {v["name"]: v["hostPath"]["path"] for v in result["spec"]["volumes"] if "hostPath" in v}
    assert "sidecar-debug-lib-modules" not in host
    assert host["sidecar-debug-lib-modules-2"] == "/lib/modules"
    app = next(c for c in result["spec"]["containers"] if c["name"] == "app")
    assert [m["name"] for m in app["volumeMounts"] if m["mountPath"] == "/host-modules"] == [
        "sidecar-debug-lib-modules"
    ]
    assert not {m["name"] for m in app["volumeMounts"]} & set(host)


@st.composite
def pods(draw: st.DrawFn) -> dict[str, Any]:
    """Pods whose containers of every kind mount random names, ours among them, declared as
    volumes or not, read-only or not, as mounts or as block devices."""
    volumes = [
        {"name": name, **draw(st.sampled_from([{"emptyDir": {}}, {"hostPath": {"path": "/x"}}]))}
        for name in draw(st.lists(st.sampled_from(NAMES), max_size=4, unique=True))
    ]
    spec: dict[str, Any] = {"volumes": volumes} if volumes else {}
    count = 0
    for kind in CONTAINER_KINDS:
        containers = []
        for _ in range(draw(st.integers(1 if kind == "containers" else 0, 3))):
            count += 1
            container: dict[str, Any] = {"name": f"c{count}", "image": "busybox"}
            if kind == "initContainers" and draw(st.booleans()):
                container["restartPolicy"] = "Always"  # a native sidecar runs beside the app
            mounts = draw(
                st.lists(
                    st.fixed_dictionaries(
                        {"name": st.sampled_from(NAMES), "mountPath": st.sampled_from(PATHS)},
                        optional={"readOnly": st.booleans()},
                    ),
                    max_size=4,
                    unique_by=lambda m: m["mountPath"],
                )
            )
            if mounts:
                container["volumeMounts"] = mounts
            if draw(st.integers(0, 4)) == 0:
                name = draw(st.sampled_from(NAMES))
                container["volumeDevices"] = [{"name": name, "devicePath": "/dev/xvda"}]
            containers.append(container)
        if containers:
            spec[kind] = containers
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": spec}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pods(), st.sampled_from(PROFILES), st.booleans())
def test_host_paths_stay_read_only_and_in_the_sidecar(
    pod: dict[str, Any], profile: str, native_sidecar: bool
) -> None:
    s = dataclasses.replace(SETTINGS, native_sidecar=native_sidecar)
    used = {m["name"] for _, m in _mounts(pod)} | {
        v["name"] for v in pod["spec"].get("volumes", [])
    }
    mutated, _ = inject_pod(pod, InjectionPlan(profile=s.profiles[profile]), s)
    added = {v["name"] for v in mutated["spec"].get("volumes", [])} - {
        v["name"] for v in pod["spec"].get("volumes", [])
    }
    assert not added & used, "a volume we add reuses a name the pod already uses"
    ours = _added_host_volumes(pod, mutated)
    assert len(ours) == len(s.profiles[profile].host_paths)
    sidecar = _sidecar(mutated)
    for container, mount in _mounts(mutated):
        if mount["name"] in ours:
            assert container == sidecar, f"{container} mounts our hostPath {mount['name']}"
            assert mount.get("readOnly") is True, f"{mount} is writable"
