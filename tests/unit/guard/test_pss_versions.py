"""Issue 26 item 5: the guard follows Pod Security by policy version, as Kubernetes' Pod Security
admission does: each check's version history, `latest` (the newest policy version, v1.37) and
newer versions clamped to it, the namespace's enforce-version label, and the version named in
every summary. Fixtures: Kubernetes' own test data per version (tests/fixtures/pss-versions)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from webhook.guard import pss
from webhook.guard.pss.check_sysctls import SAFE_SYSCTLS_BY_VERSION, safe_sysctls
from webhook.guard.pss.version import Version, v1

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "pss-versions"


def level_of(name: str) -> pss.Level:
    """A fixture folder's name as the level it is (one of pss.LEVELS)."""
    for level in pss.LEVELS:
        if level == name:
            return level
    raise AssertionError(f"{name!r} is not a Pod Security level")


def fixtures() -> list[tuple[pss.Level, Version, str, Path]]:
    """(level, version, pass|fail, file) of every fixture."""
    found = []
    for path in sorted(FIXTURES.glob("*/v1.*/*/*.yaml")):
        level, version, expect = path.parts[-4], path.parts[-3], path.parts[-2]
        parsed = pss.parse_version(version)
        assert parsed is not None
        found.append((level_of(level), parsed, expect, path))
    return found


FIXTURE_FILES = fixtures()


def load(path: Path) -> dict[str, Any]:
    pod = yaml.safe_load(path.read_text())
    assert isinstance(pod, dict)
    return pod


def fixture(relative: str) -> dict[str, Any]:
    return load(FIXTURES / relative)


def failed(pod: dict[str, Any], level: pss.Level, version: str | Version) -> set[str]:
    return {v.check for v in pss.check_pod(pod, level, version=version)}


@pytest.mark.parametrize(
    "item", FIXTURE_FILES, ids=[f"{i[0]}/{i[1]}/{i[2]}/{i[3].stem}" for i in FIXTURE_FILES]
)
def test_each_kubernetes_fixture_at_its_version(
    item: tuple[pss.Level, Version, str, Path],
) -> None:
    level, version, expect, path = item
    result = pss.evaluate(load(path), level, version=version)
    assert result.allowed == (expect == "pass"), [str(f) for f in result.findings]
    assert result.version.applied == version


def test_the_fixtures_cover_the_versions_where_behaviour_changes() -> None:
    assert len(FIXTURE_FILES) >= 8
    assert {str(v) for _, v, _, _ in FIXTURE_FILES} >= {"v1.29", "v1.34", "v1.35", "v1.37"}


@pytest.mark.parametrize(
    ("relative", "level", "before", "after", "check"),
    [
        # sysctls: tcp_keepalive_time is safe from 1.29
        ("baseline/v1.29/pass/sysctls1.yaml", "baseline", "v1.28", "v1.29", "sysctls"),
        # sysctls: tcp_slow_start_after_idle and tcp_notsent_lowat from 1.37 (the case)
        ("baseline/v1.37/pass/sysctls1.yaml", "baseline", "v1.36", "v1.37", "sysctls"),
        # a probe host is forbidden from 1.34: before, the check does not exist
        ("baseline/v1.34/fail/hostprobesandhostlifecycle0.yaml", "baseline", "v1.34", "v1.33",
         "hostProbesAndHostLifecycle"),
        # procMount Unmasked in a user namespace: baseline allows it from 1.35
        ("baseline/v1.35/pass/procmount_baseline1.yaml", "baseline", "v1.34", "v1.35",
         "procMount"),
    ],
)
def test_a_check_changes_at_the_version_pod_security_changed_it(
    relative: str, level: pss.Level, before: str, after: str, check: str
) -> None:
    """`before` fails `check` and `after` passes (for a fail fixture the order is reversed:
    it fails from `before`)."""
    pod = fixture(relative)
    assert failed(pod, level, before) == {check}
    assert failed(pod, level, after) == set()


def test_restricted_keeps_proc_masked_in_a_user_namespace() -> None:
    """Restricted from 1.35: procMount_restricted replaces procMount (which now spares a user
    namespace); before 1.35 baseline's procMount does the job, so the pod fails at both."""
    pod = fixture("restricted/v1.35/fail/procmount_restricted0.yaml")
    assert failed(pod, "restricted", "v1.35") == {"procMount_restricted"}
    assert failed(pod, "restricted", "latest") == {"procMount_restricted"}
    assert failed(pod, "restricted", "v1.34") == {"procMount"}
    assert failed(pod, "baseline", "v1.35") == set()


def test_a_volume_without_a_source_is_an_empty_dir() -> None:
    """The issue's case: `- name: volume0` is what the apiserver makes an emptyDir; it was
    refused as "restricted volume type unknown"."""
    pod = fixture("restricted/v1.0/pass/restrictedvolumes0.yaml")
    for version in ("v1.0", "v1.25", "latest"):
        assert failed(pod, "restricted", version) == set()
    # A source the API does not know is still refused (fail closed).
    pod["spec"]["volumes"].append({"name": "odd", "madeUp": {}})
    assert failed(pod, "restricted", "latest") == {"restrictedVolumes"}


def test_the_sysctls_safe_at_each_version() -> None:
    """As check_sysctls.go lists them, each set adding to the one before."""
    assert [str(v) for v, _ in SAFE_SYSCTLS_BY_VERSION] == [
        "v1.0", "v1.27", "v1.29", "v1.32", "v1.37"]
    assert len(safe_sysctls(v1(0))) == 5
    assert safe_sysctls(v1(26)) == safe_sysctls(v1(0))
    assert safe_sysctls(v1(27)) - safe_sysctls(v1(26)) == {"net.ipv4.ip_local_reserved_ports"}
    assert safe_sysctls(v1(32)) - safe_sysctls(v1(31)) == {"net.ipv4.tcp_rmem",
                                                            "net.ipv4.tcp_wmem"}
    assert len(safe_sysctls(v1(37))) == 14
    pod = fixture("baseline/v1.2/fail/sysctls0.yaml")
    for version in ("v1.0", "v1.2", "v1.37", "latest"):
        assert failed(pod, "baseline", version) == {"sysctls"}


def windows(**security: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "w"},
            "spec": {"os": {"name": "windows"},
                     "securityContext": {"runAsNonRoot": True},
                     "containers": [{"name": "c", "image": "x", "securityContext": security}]}}


def test_windows_pods_are_spared_restricteds_own_checks_from_1_25() -> None:
    pod = windows()
    assert failed(pod, "restricted", "v1.25") == set()
    assert failed(pod, "restricted", "v1.24") == {
        "allowPrivilegeEscalation", "capabilities_restricted", "seccompProfile_restricted"}


def test_restricted_checks_start_at_their_versions() -> None:
    """Before a restricted check exists, the baseline check it replaces applies: capabilities
    from 1.22, runAsUser from 1.23, allowPrivilegeEscalation from 1.8."""
    pod: dict[str, Any] = {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
        "spec": {"securityContext": {"runAsNonRoot": True, "runAsUser": 0,
                                     "seccompProfile": {"type": "RuntimeDefault"}},
                 "containers": [{"name": "c", "image": "x", "securityContext": {
                     "allowPrivilegeEscalation": False,
                     "capabilities": {"add": ["SYS_ADMIN"]}}}]}}
    assert failed(pod, "restricted", "v1.23") == {"capabilities_restricted", "runAsUser"}
    assert failed(pod, "restricted", "v1.22") == {"capabilities_restricted"}
    assert failed(pod, "restricted", "v1.21") == {"capabilities_baseline"}
    pod["spec"]["containers"][0]["securityContext"] = {"capabilities": {"drop": ["ALL"]}}
    assert "allowPrivilegeEscalation" in failed(pod, "restricted", "v1.8")
    assert "allowPrivilegeEscalation" not in failed(pod, "restricted", "v1.7")


def test_se_linux_container_engine_t_from_1_31() -> None:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
           "spec": {"securityContext": {"seLinuxOptions": {"type": "container_engine_t"}},
                    "containers": [{"name": "c", "image": "x"}]}}
    assert failed(pod, "baseline", "v1.30") == {"seLinuxOptions"}
    assert failed(pod, "baseline", "v1.31") == set()


@pytest.mark.parametrize(
    ("asked", "policy"),
    [
        ("latest", "baseline:latest (v1.37)"),
        ("v1.20", "baseline:v1.20"),
        ("v1.0", "baseline:v1.0"),
        ("v1.37", "baseline:v1.37"),
        ("v1.40", "baseline:v1.40 (v1.37)"),  # newer than any check: the newest applies
    ],
)
def test_every_summary_names_the_version_applied(asked: str, policy: str) -> None:
    pod = fixture("baseline/v1.2/fail/sysctls0.yaml")
    result = pss.evaluate(pod, "baseline", version=asked)
    assert result.policy == policy
    assert result.message().startswith(f'violates PodSecurity "{policy}": forbidden sysctls')


@pytest.mark.parametrize("bad", ["v1", "1.30", "v2.0", "v1.01", "V1.30", "v1.30.1", " latest",
                                 "", "v1.-1", "v1.12345678901234567890", 1.3])
def test_an_invalid_version_is_read_as_latest_and_said(bad: Any) -> None:
    """As Pod Security admission reads an invalid enforce-version label: latest (fail closed),
    with the reason kept for the message."""
    with pytest.raises(ValueError, match="not a Pod Security version"):
        pss.parse_version(bad)
    version = pss.resolve(bad)
    assert version.requested is None and version.applied == pss.NEWEST
    assert "read as latest, as Pod Security does" in version.problem


def test_latest_is_the_newest_version_of_any_check() -> None:
    assert pss.NEWEST == v1(37)
    assert pss.NEWEST == max(v.minimum for c in pss.CHECKS for v in c.versions)
