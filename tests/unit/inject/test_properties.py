"""Properties of injection over generated pods (hypothesis).

1. The JSONPatch applied to the original pod gives exactly the mutated pod.
2. Injecting twice is injecting once: the second review returns no patch.
3. Injection never writes to the pod it was given (the copy shares its unchanged parts).
4. Every injected pod validates against the Kubernetes OpenAPI schema (strict).
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.unit.core_helpers import admission_review, default_settings, mutator, validate_pod
from webhook.admission.review import decode_patch
from webhook.inject.patch import apply_patch, create_patch
from webhook.inject.sidecar import InjectionPlan, inject_pod

dns_label = st.from_regex(r"[a-z][a-z0-9-]{0,10}[a-z0-9]", fullmatch=True)
# Keys with "/", "~" and dots, the characters JSON Pointer escaping gets wrong.
meta_key = st.from_regex(r"([a-z0-9.~-]{1,12}/)?[a-zA-Z0-9~._-]{1,12}", fullmatch=True)
env_name = st.from_regex(r"[A-Z_][A-Z0-9_]{0,12}", fullmatch=True)
mount_path = st.sampled_from(["/tmp", "/tmp/", "/var/run/lttng", "/data", "/cache", "/usr/src"])
PROFILES = sorted(default_settings().profiles)
RUNTIMES = sorted(default_settings().profile_set.runtimes)


@st.composite
def pods(draw: st.DrawFn) -> dict[str, Any]:
    volume_names = draw(st.lists(dns_label, max_size=4, unique=True))
    volumes = [{"name": n, "emptyDir": {}} for n in volume_names]
    names = draw(st.lists(dns_label, min_size=1, max_size=5, unique=True))
    containers = []
    for name in names:
        container: dict[str, Any] = {"name": name, "image": "busybox"}
        if volume_names:
            chosen = draw(
                st.lists(
                    st.tuples(st.sampled_from(volume_names), mount_path),
                    max_size=3,
                    unique_by=lambda t: t[1].rstrip("/"),
                )
            )
            if chosen:
                container["volumeMounts"] = [{"name": v, "mountPath": p} for v, p in chosen]
        env = draw(
            st.lists(st.tuples(env_name, st.text(max_size=8)), max_size=3, unique_by=lambda t: t[0])
        )
        env += draw(
            st.sampled_from([[], [("NODE_OPTIONS", "--inspect")], [("PYTHONPERFSUPPORT", "0")]])
        )
        seen: set[str] = set()
        entries = []
        for key, value in env:
            if key not in seen:
                seen.add(key)
                entries.append({"name": key, "value": value})
        if entries:
            container["env"] = entries
        containers.append(container)
    spec: dict[str, Any] = {"containers": containers}
    if volumes:
        spec["volumes"] = volumes
    if draw(st.booleans()):
        spec["initContainers"] = [{"name": "init-" + names[0][:20], "image": "busybox"}]
    choice = draw(st.sampled_from(["unset", "false", "true", "hostPID"]))
    if choice == "hostPID":
        spec["hostPID"] = True
    elif choice != "unset":
        spec["shareProcessNamespace"] = choice == "true"
    metadata: dict[str, Any] = {}
    if draw(st.booleans()):
        metadata["name"] = names[0]
    else:
        metadata["generateName"] = names[0] + "-"
    labels = draw(
        st.dictionaries(meta_key, st.from_regex(r"[a-z0-9]{0,8}", fullmatch=True), max_size=3)
    )
    annotations = draw(st.dictionaries(meta_key, st.text(max_size=10), max_size=3))
    if draw(st.booleans()):
        annotations["sidecar-debug.io/profile"] = draw(st.sampled_from(PROFILES))
    if draw(st.booleans()):
        annotations["sidecar-debug.io/runtime"] = draw(st.sampled_from(RUNTIMES))
    labels.pop("debug", None)
    annotations.pop("sidecar-debug.io/inject", None)
    annotations.pop("sidecar-debug.io/status", None)
    if labels:
        metadata["labels"] = labels
    if annotations:
        metadata["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


COMMON = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@COMMON
@given(pods())
def test_patch_applied_to_original_equals_mutated(pod: dict[str, Any]) -> None:
    s = default_settings()
    profile = s.profiles[
        pod["metadata"].get("annotations", {}).get("sidecar-debug.io/profile", "full")
    ]
    mutated, _ = inject_pod(pod, InjectionPlan(profile=profile, runtime="node"), s)
    assert apply_patch(pod, create_patch(pod, mutated)) == mutated
    review = mutator().review(admission_review(pod))
    patched = apply_patch(pod, decode_patch(review))
    assert patched["spec"]["containers"][0]["name"].startswith("debug-toolset")


@COMMON
@given(pods(), st.sampled_from(RUNTIMES), st.booleans())
def test_injection_leaves_the_original_pod_untouched(
    pod: dict[str, Any], runtime: str, native_sidecar: bool
) -> None:
    s = dataclasses.replace(default_settings(), native_sidecar=native_sidecar)
    before = copy.deepcopy(pod)
    for profile in s.profiles.values():
        mutated, _ = inject_pod(pod, InjectionPlan(profile=profile, runtime=runtime), s)
        assert pod == before
        assert apply_patch(pod, create_patch(pod, mutated)) == mutated


@COMMON
@given(pods())
def test_injecting_twice_equals_injecting_once(pod: dict[str, Any]) -> None:
    once = apply_patch(pod, decode_patch(mutator().review(admission_review(pod))))
    second = mutator().review(admission_review(once))
    assert "patch" not in second["response"]
    assert second["response"]["auditAnnotations"]["reason"] == "already-injected"


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pods())
def test_every_injected_pod_validates_against_the_kubernetes_schema(pod: dict[str, Any]) -> None:
    validate_pod(pod)  # the generator itself must produce valid pods
    once = apply_patch(pod, decode_patch(mutator().review(admission_review(pod))))
    validate_pod(once)


@COMMON
@given(st.lists(st.integers(0, 5), max_size=8), st.lists(st.integers(0, 5), max_size=8))
def test_list_diff_round_trips(old: list[int], new: list[int]) -> None:
    doc_old: dict[str, Any] = {"a": [{"name": str(i), "v": i} for i in old]}
    doc_new: dict[str, Any] = {"a": [{"name": str(i), "v": i * 2} for i in new]}
    assert apply_patch(doc_old, create_patch(doc_old, doc_new)) == doc_new
