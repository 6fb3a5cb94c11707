"""The chart's copy of the privilege rule agrees with the webhook's (the one in Python).

The chart decides which profiles need an RBAC grant to warn about missing grant ClusterRoles at
install time (templates/_helpers.tpl `sidecar-debug.privilegedProfiles`); the webhook decides
the same at admission (webhook/policy/privilege.py). Both answer for one generated profile set
covering every privilege reason and its harmless neighbours; the answers must be the same.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.chart.helm import notes
from webhook.policy.privilege import privilege_reasons

pytestmark = pytest.mark.chart

PRIVILEGED = [None, False, True]
ESCALATION = [None, False, True]
SECCOMP = [None, "RuntimeDefault", "Unconfined", "Localhost"]
CAPABILITIES = [
    [],
    ["CHOWN", "CAP_KILL", "NET_BIND_SERVICE"],  # within baseline, with and without CAP_
    ["SYS_PTRACE"],
    ["CAP_BPF", "SETUID"],  # one beyond baseline among baseline ones
    ["NET_RAW"],  # a runtime default, but not in the Pod Security baseline list
]
HOST_PATHS = [[], [{"name": "modules", "path": "/lib/modules"}]]


def generated_profiles() -> list[dict[str, Any]]:
    profiles = []
    combinations = itertools.product(PRIVILEGED, ESCALATION, SECCOMP, CAPABILITIES, HOST_PATHS)
    for number, (privileged, escalation, seccomp, caps, host_paths) in enumerate(combinations):
        security_context: dict[str, Any] = {"runAsUser": 0}
        if privileged is not None:
            security_context["privileged"] = privileged
        if escalation is not None:
            security_context["allowPrivilegeEscalation"] = escalation
        if seccomp is not None:
            security_context["seccompProfile"] = {"type": seccomp}
        if caps:
            security_context["capabilities"] = {"add": caps, "drop": ["ALL"]}
        profile: dict[str, Any] = {
            "name": f"p{number}",
            "description": "generated",
            "techniques": ["lttng"],
            "securityContext": security_context,
        }
        if host_paths:
            profile["hostPaths"] = host_paths
        profiles.append(profile)
    return profiles


def python_answer(profiles: list[dict[str, Any]]) -> set[str]:
    return {
        p["name"]
        for p in profiles
        if privilege_reasons(p["securityContext"], [h["path"] for h in p.get("hostPaths", [])])
    }


def chart_answer(profiles: list[dict[str, Any]], tmp_path: Path) -> set[str]:
    """The profiles the chart warns need a grant, with no grant ClusterRoles configured."""
    values = tmp_path / "profiles-values.yaml"
    values.write_text(yaml.safe_dump({
        "profiles": profiles,
        "sidecar": {"defaultProfile": profiles[0]["name"]},
        "rbac": {"profileRoles": []},
    }))  # fmt: skip
    text = notes([values])
    return set(re.findall(r'profile "([^"]+)" needs an RBAC grant', text))


def test_the_generated_set_covers_each_reason_alone() -> None:
    """Each privilege reason occurs in some profile as its only reason (so the comparison below
    checks each branch of the rule on its own), and harmless profiles exist too."""
    profiles = generated_profiles()
    alone: set[str] = set()
    harmless = 0
    for p in profiles:
        reasons = privilege_reasons(
            p["securityContext"], [h["path"] for h in p.get("hostPaths", [])]
        )
        if len(reasons) == 1:
            alone.add(reasons[0].split()[0])
        harmless += not reasons
    assert alone == {
        "privileged",
        "capabilities",
        "hostPath",
        "seccomp",
        "allowPrivilegeEscalation",
    }
    assert harmless >= 10


def test_chart_and_webhook_agree_on_which_profiles_need_a_grant(tmp_path: Path) -> None:
    profiles = generated_profiles()
    expected = python_answer(profiles)
    found = chart_answer(profiles, tmp_path)
    by_name = {p["name"]: p for p in profiles}
    disagreements = {name: by_name[name]["securityContext"] for name in found ^ expected}
    assert not disagreements, (
        "chart and webhook disagree (securityContext of each profile; hostPaths "
        f"{ {n: by_name[n].get('hostPaths') for n in disagreements} }):\n{disagreements}"
    )
    assert found, "the chart warned about no profile: the comparison would prove nothing"


def test_builtin_profiles(tmp_path: Path) -> None:
    """The shipped profiles: everything but lttng needs a grant, in both."""
    builtin = yaml.safe_load(
        (Path(__file__).resolve().parents[2] / "webhook" / "data" / "profiles.yaml").read_text()
    )["profiles"]
    assert python_answer(builtin) == {"perf", "bcc", "full"}
    assert chart_answer(builtin, tmp_path) == {"perf", "bcc", "full"}
