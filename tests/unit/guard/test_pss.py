"""Issue 17 item 1-2: the Pod Security Standards as Pod Security admission checks them.

The conformance fixtures (tests/fixtures/pss, written from the standards' text, one file per
control) are run through `check_pod`; `guard check` runs the same files in test_guard_cli.py.
The rest tries to get around the checks: spellings, wrong types, nulls, second names, huge pods.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from webhook.guard import pss
from webhook.manifest_yaml import _CheckLoader

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "pss"
EXPECT = "pss.sidecar-debug.io/expect"
CHECK = "pss.sidecar-debug.io/check"
FIELD = "pss.sidecar-debug.io/field"


def fixture_documents() -> list[tuple[pss.Level, Path, int, dict[str, Any]]]:
    """(level, file, document number, pod) of every fixture."""
    found: list[tuple[pss.Level, Path, int, dict[str, Any]]] = []
    for level in pss.LEVELS:
        for path in sorted((FIXTURES / level).glob("*.yaml")):
            documents = yaml.load_all(path.read_text(), Loader=_CheckLoader)  # noqa: S506
            for number, pod in enumerate(documents, 1):
                found.append((level, path, number, pod))
    return found


FIXTURE_DOCUMENTS = fixture_documents()


def fixture_id(item: tuple[pss.Level, Path, int, dict[str, Any]]) -> str:
    level, path, number, pod = item
    return f"{level}/{path.stem}/{number}-{pod['metadata']['name']}"


@pytest.mark.parametrize("item", FIXTURE_DOCUMENTS, ids=[fixture_id(i) for i in FIXTURE_DOCUMENTS])
def test_each_fixture_passes_or_fails_its_one_field(
    item: tuple[pss.Level, Path, int, dict[str, Any]],
) -> None:
    level, _, _, pod = item
    annotations = pod["metadata"]["annotations"]
    found = {(v.check, v.field) for v in pss.check_pod(pod, level)}
    if annotations[EXPECT] == "pass":
        assert found == set()
    else:
        assert found == {(annotations[CHECK], annotations[FIELD])}


def test_fixtures_are_pods_kubernetes_accepts_the_shape_of() -> None:
    """Each fixture is a valid Pod of Kubernetes 1.36 (strict schema: no misspelled field that
    the checks would never see)."""
    for level, path, number, pod in FIXTURE_DOCUMENTS:
        try:
            kubernetes_validate.validate(pod, "1.36", strict=True)
        except kubernetes_validate.ValidationError as exc:
            raise AssertionError(f"{level}/{path.name} document {number}: {exc}") from None


def test_every_check_has_pass_and_fail_fixtures() -> None:
    failing = {d[3]["metadata"]["annotations"].get(CHECK) for d in FIXTURE_DOCUMENTS}
    assert failing >= {c.id for c in pss.CHECKS}
    for path in {d[1] for d in FIXTURE_DOCUMENTS}:
        expected = {d[3]["metadata"]["annotations"][EXPECT] for d in FIXTURE_DOCUMENTS
                    if d[1] == path}
        assert expected == {"pass", "fail"}, path


def test_container_checks_cover_every_container_kind() -> None:
    """For checks of container fields, fixtures fail in containers, init containers (or native
    sidecars) and ephemeral containers alike."""
    kinds: dict[str, set[str]] = {}
    for _, _, _, pod in FIXTURE_DOCUMENTS:
        field = pod["metadata"]["annotations"].get(FIELD, "")
        for kind in pss.CONTAINER_KINDS:
            if field.startswith(f"spec.{kind}["):
                kinds.setdefault(pod["metadata"]["annotations"][CHECK], set()).add(kind)
    for check in ("privileged", "capabilities_baseline", "hostPorts", "windowsHostProcess",
                  "seLinuxOptions", "procMount", "seccompProfile_baseline", "appArmorProfile"):
        assert kinds[check] == set(pss.CONTAINER_KINDS), check


def test_restricted_is_baseline_and_more() -> None:
    """Every baseline failure fails restricted too (the same field), and every restricted pass
    passes baseline."""
    for level, path, number, pod in FIXTURE_DOCUMENTS:
        annotations = pod["metadata"]["annotations"]
        if level == "baseline" and annotations[EXPECT] == "fail":
            fields = {v.field for v in pss.check_pod(pod, "restricted")}
            assert annotations[FIELD] in fields, (path.name, number)
        if level == "restricted" and annotations[EXPECT] == "pass":
            assert pss.check_pod(pod, "baseline") == [], (path.name, number)


def pod(*containers: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
            "spec": {"containers": list(containers) or [{"name": "app", "image": "x"}], **spec}}


def test_the_summary_is_worded_as_pod_security_admission_words_it() -> None:
    subject = pod(
        {"name": "a", "image": "x", "securityContext": {"privileged": True}},
        {"name": "b", "image": "x", "securityContext": {"privileged": True,
                                                       "capabilities": {"add": ["SYS_ADMIN"]}}},
        hostNetwork=True, hostPID=True,
        volumes=[{"name": "root", "hostPath": {"path": "/"}}],
    )
    result = pss.evaluate(subject, "baseline")
    assert result.message() == (
        'violates PodSecurity "baseline:latest (v1.37)": non-default capabilities (container '
        '"b" must not include "SYS_ADMIN" in securityContext.capabilities.add), host namespaces '
        '(hostNetwork=true, hostPID=true), hostPath volumes (volume "root"), privileged '
        '(containers "a", "b" must not set securityContext.privileged=true)'
    )
    [privileged_b] = [v for v in result.violations
                      if v.check == "privileged" and v.container and v.container.name == "b"]
    assert privileged_b.field == "spec.containers[1].securityContext.privileged"
    assert privileged_b.container == pss.ContainerRef("containers", "b", 1)
    assert privileged_b.message == 'container "b" must not set securityContext.privileged=true'


# -- trying to get around the checks -----------------------------------------------------------


@pytest.mark.parametrize(
    ("security_context", "check"),
    [
        ({"privileged": "true"}, "privileged"),
        ({"privileged": 1}, "privileged"),
        ({"capabilities": {"add": [{"name": "SYS_ADMIN"}]}}, "capabilities_baseline"),
        ({"capabilities": {"add": "SYS_ADMIN"}}, pss.MALFORMED),
        ({"capabilities": ["SYS_ADMIN"]}, pss.MALFORMED),
        ({"seLinuxOptions": {"type": ["spc_t"]}}, "seLinuxOptions"),
        ({"procMount": ["Unmasked"]}, "procMount"),
        ({"seccompProfile": {}}, "seccompProfile_baseline"),  # a profile without a type
        ({"appArmorProfile": {}}, "appArmorProfile"),
        ({"appArmorProfile": {"type": "unconfined"}}, "appArmorProfile"),
        ({"windowsOptions": {"hostProcess": "yes"}}, "windowsHostProcess"),
    ],
)
def test_a_value_of_another_type_or_spelling_is_refused_never_read_as_unset(
    security_context: dict[str, Any], check: str
) -> None:
    subject = pod({"name": "a", "image": "x", "securityContext": security_context})
    assert check in {v.check for v in pss.check_pod(subject, "baseline")}


def test_host_ports_and_host_namespaces_of_other_types_are_refused() -> None:
    subject = pod({"name": "a", "image": "x", "ports": [{"containerPort": 1, "hostPort": "80"},
                                                        {"containerPort": 2, "hostPort": False}]},
                  hostIPC="false")
    fields = {v.field for v in pss.check_pod(subject, "baseline")}
    assert fields == {"spec.containers[0].ports[0].hostPort",
                      "spec.containers[0].ports[1].hostPort", "spec.hostIPC"}


def test_run_as_user_zero_spelled_otherwise_is_refused_in_restricted() -> None:
    for value in ("0", True, 0.0, None):
        subject = pod({"name": "a", "image": "x", "securityContext": {
            "runAsUser": value, "runAsNonRoot": True, "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}}})
        found = {v.check for v in pss.check_pod(subject, "restricted")}
        assert found == (set() if value is None else {"runAsUser"}), value


def test_a_windows_pod_is_spared_only_restricted_additions_not_baseline() -> None:
    subject = pod({"name": "a", "image": "x", "securityContext": {
        "capabilities": {"add": ["SYS_ADMIN"]}, "seccompProfile": {"type": "Unconfined"}}},
        os={"name": "windows"}, securityContext={"runAsNonRoot": True})
    assert {v.check for v in pss.check_pod(subject, "restricted")} == {
        "capabilities_baseline", "seccompProfile_baseline"}


def test_a_volume_exempted_by_name_does_not_cover_a_second_volume_of_that_name() -> None:
    subject = pod(volumes=[{"name": "modules", "hostPath": {"path": "/lib/modules"}},
                           {"name": "modules", "hostPath": {"path": "/"}}])
    exempt = pss.Exemption(volumes=frozenset({"modules"}))
    found = {(v.check, v.field) for v in pss.check_pod(subject, "baseline", exempt)}
    assert found == {
        (pss.MALFORMED, "spec.volumes[0].name"), (pss.MALFORMED, "spec.volumes[1].name"),
        ("hostPathVolumes", "spec.volumes[0].hostPath"),
        ("hostPathVolumes", "spec.volumes[1].hostPath"),
    }


def test_an_exempted_container_is_skipped_but_pod_fields_and_annotations_are_not() -> None:
    subject = pod(
        {"name": "app", "image": "x"},
        {"name": "debug-toolset", "image": "t", "securityContext": {"privileged": True}},
        hostPID=True,
        volumes=[{"name": "modules", "hostPath": {"path": "/lib/modules"}},
                 {"name": "other", "hostPath": {"path": "/etc"}}],
    )
    subject["metadata"]["annotations"] = {
        "container.apparmor.security.beta.kubernetes.io/debug-toolset": "unconfined"}
    exempt = pss.Exemption(containers=frozenset({("containers", "debug-toolset")}),
                           volumes=frozenset({"modules"}))
    found = {(v.check, v.field) for v in pss.check_pod(subject, "baseline", exempt)}
    assert found == {
        ("hostNamespaces", "spec.hostPID"),
        ("hostPathVolumes", "spec.volumes[1].hostPath"),
        ("appArmorProfile",
         'metadata.annotations["container.apparmor.security.beta.kubernetes.io/debug-toolset"]'),
    }
    # An exemption names a kind too: the same name in another list is checked.
    exempt = pss.Exemption(containers=frozenset({("initContainers", "debug-toolset")}))
    assert "privileged" in {v.check for v in pss.check_pod(subject, "baseline", exempt)}


@pytest.mark.parametrize(
    ("security_context", "annotation", "value", "refused"),
    [
        # What Kubernetes 1.19+ writes from the exempted container's own field: exempt too.
        ({"seccompProfile": {"type": "Unconfined"}}, "container.seccomp", "unconfined", False),
        ({"appArmorProfile": {"type": "Unconfined"}}, "container.apparmor", "unconfined", False),
        ({"seccompProfile": {"type": "Localhost", "localhostProfile": "a.json"}},
         "container.seccomp", "localhost/a.json", False),
        # Anything the field does not say is the pod creator's: checked.
        ({}, "container.seccomp", "unconfined", True),
        ({"seccompProfile": {"type": "RuntimeDefault"}}, "container.seccomp", "unconfined", True),
        ({"seccompProfile": {"type": "Unconfined"}}, "container.apparmor", "unconfined", True),
        ({"appArmorProfile": {"type": "RuntimeDefault"}}, "container.apparmor", "unconfined",
         True),
    ],
)
def test_an_exempted_containers_own_annotations_follow_its_fields(
    security_context: dict[str, Any], annotation: str, value: str, refused: bool
) -> None:
    key = {"container.seccomp": pss.SECCOMP_CONTAINER_ANNOTATION_PREFIX,
           "container.apparmor": pss.APPARMOR_ANNOTATION_PREFIX}[annotation] + "debug-toolset"
    subject = pod({"name": "app", "image": "x"},
                  {"name": "debug-toolset", "image": "t", "securityContext": security_context})
    subject["metadata"]["annotations"] = {key: value}
    exempt = pss.Exemption(containers=frozenset({("containers", "debug-toolset")}))
    found = [v.field for v in pss.check_pod(subject, "baseline", exempt)]
    assert found == ([f"metadata.annotations[{json.dumps(key)}]"] if refused else [])
    # The same annotation for a container that is not exempted is always checked.
    subject["metadata"]["annotations"] = {key.replace("debug-toolset", "app"): value}
    assert (pss.check_pod(subject, "baseline", exempt) != []) == (value == "unconfined")


def test_restricted_implicit_checks_ignore_exempted_containers() -> None:
    compliant = {"name": "app", "image": "x", "securityContext": {
        "runAsNonRoot": True, "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}}}
    subject = pod(compliant, {"name": "debug-toolset", "image": "t",
                              "securityContext": {"runAsUser": 0}})
    exempt = pss.Exemption(containers=frozenset({("containers", "debug-toolset")}))
    assert pss.check_pod(subject, "restricted", exempt) == []
    assert pss.check_pod(subject, "restricted") != []


@pytest.mark.parametrize(
    "subject",
    [
        None, [], "pod", 3,
        {"spec": None}, {"spec": []}, {"metadata": "x", "spec": {"containers": None}},
        {"metadata": {"annotations": ["a"]}, "spec": {}},
        {"spec": {"containers": [None, 3, "x", []]}},
        {"spec": {"containers": [{"name": None, "securityContext": None, "ports": None}]}},
        {"spec": {"containers": [{"name": {"a": 1}, "ports": [None, 1, {"hostPort": None}]}]}},
        {"spec": {"securityContext": {"sysctls": "kernel.msgmax", "seLinuxOptions": "spc_t"}}},
        {"spec": {"volumes": {"name": "a"}}},
        {"spec": {"volumes": [{"hostPath": None}, {"name": 3, "hostPath": "/"}]}},
        {"spec": {"containers": [{"name": "a", "livenessProbe": {"httpGet": "x"},
                                  "lifecycle": {"preStop": None, "postStart": []}}]}},
    ],
)
def test_hostile_shapes_never_raise_and_are_never_admitted(subject: Any) -> None:
    for level in pss.LEVELS:
        result = pss.evaluate(subject, level)
        assert isinstance(result.message(), str)
    # null is absent for an object's field, as in the API: nothing there to refuse
    benign = ({"spec": None},
              {"spec": {"containers": [{"name": None, "securityContext": None, "ports": None}]}})
    if subject not in benign:
        assert not pss.evaluate(subject, "baseline").allowed


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8)
    | st.sampled_from(["Unconfined", "ALL", "spc_t", "/", "Unmasked", "RuntimeDefault"]),
    lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.sampled_from(
        ["name", "type", "add", "drop", "hostPath", "hostPort", "ports", "securityContext",
         "capabilities", "privileged", "seccompProfile", "path", "host", "httpGet", "volumes",
         "containers", "sysctls", "runAsUser", "runAsNonRoot", "appArmorProfile"]), inner,
        max_size=4),
    max_leaves=12,
)


@given(JSON, st.sampled_from(["securityContext", "ports", "livenessProbe", "lifecycle",
                              "volumes", "pod-securityContext", "annotations", "spec"]))
@settings(max_examples=400, deadline=None)
def test_any_value_anywhere_never_raises(value: Any, where: str) -> None:
    subject = pod({"name": "a", "image": "x"})
    if where == "pod-securityContext":
        subject["spec"]["securityContext"] = value
    elif where == "annotations":
        subject["metadata"]["annotations"] = value
    elif where == "spec":
        subject["spec"] = value
    elif where == "volumes":
        subject["spec"]["volumes"] = value
    else:
        subject["spec"]["containers"][0][where] = value
    before = copy.deepcopy(subject)
    for level in pss.LEVELS:
        pss.evaluate(subject, level).message()
    assert subject == before  # read only


def test_a_huge_pod_is_checked_whole() -> None:
    containers: list[dict[str, Any]] = [
        {"name": f"c{i}", "image": "x", "ports": [{"containerPort": 80}]} for i in range(5000)]
    containers[4321]["securityContext"] = {"privileged": True}
    found = pss.check_pod(pod(*containers), "baseline")
    assert [v.field for v in found] == ["spec.containers[4321].securityContext.privileged"]


def test_long_or_control_character_names_stay_one_short_line() -> None:
    name = "x\n\u2028" + "y" * 500
    subject = pod({"name": name, "image": "x", "securityContext": {"privileged": True}})
    result = pss.evaluate(subject, "baseline")
    text = result.message()
    assert "\n" not in text and "\u2028" not in text and len(text) < 300
    assert result.violations[0].container is not None
    assert result.violations[0].container.name == name  # the data keeps the name itself


def test_an_unknown_level_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="level must be one of baseline, restricted"):
        pss.evaluate(pod(), "privileged")  # type: ignore[arg-type]  # a bad level on purpose


def test_the_registry_refuses_a_broken_registration() -> None:
    """Issue 27 item 4: a check module registers its CHECK; a duplicate ID, an unknown level,
    no versions or versions out of order, an override of a check that does not exist, or a
    baseline check replacing another, stops the import rather than run the guard on a wrong
    list."""
    from webhook.guard.pss.checks import Check, VersionedCheck
    from webhook.guard.pss.registry import validated
    from webhook.guard.pss.version import v1

    def run(_: Any) -> None:
        return None

    def at(*minors: int) -> tuple[VersionedCheck, ...]:
        return tuple(VersionedCheck(v1(m), run) for m in minors)

    privileged = Check("privileged", "baseline", at(0))
    assert [c.id for c in validated([Check("sysctls", "baseline", at(0, 27)), privileged])] == [
        "privileged", "sysctls"]
    for broken, why in (
        ([privileged, Check("privileged", "restricted", at(0))], "registered twice"),
        ([Check("bad id", "baseline", at(0))], "not a Pod Security check ID"),
        ([Check("malformed", "baseline", at(0))], "not a Pod Security check ID"),
        # A level that is not one, on purpose: validated() must refuse it.
        ([Check("x", "privileged", at(0))], "unknown level"),  # type: ignore[arg-type]
        ([Check("x", "baseline", ())], "has no version"),
        ([Check("x", "baseline", at(27, 27))], "strictly increasing"),
        ([Check("x", "baseline", at(29, 27))], "strictly increasing"),
        ([Check("x", "restricted", at(0), ("nothing",))], "overrides unknown check"),
        ([privileged, Check("x", "baseline", at(0), ("privileged",))], "may not override"),
    ):
        with pytest.raises(ValueError, match=why):
            validated(broken)


def test_every_check_module_registers_its_check() -> None:
    """Each check_*.py module of the package is in the registry: a new module is not silently
    left out."""
    import importlib

    package = Path(pss.__file__).parent
    modules = sorted(p.stem for p in package.glob("check_*.py"))
    registered = {importlib.import_module(f"webhook.guard.pss.{m}").CHECK.id for m in modules}
    assert registered == {c.id for c in pss.CHECKS}
    assert len(modules) == len(pss.CHECKS) == 19
