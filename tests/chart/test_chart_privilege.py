"""The chart's copy of the privilege rule agrees with the webhook's (the one in Python).

The chart decides which profiles need an RBAC grant to warn about missing grant ClusterRoles at
install time (templates/_helpers.tpl `sidecar-debug.privilegedProfiles`); the webhook decides
the same at admission (webhook/guard/privilege.py: beyond Pod Security baseline, by the
guard's checks). Both answer for one generated profile set covering every check of a
securityContext (each value alone, then seeded combinations) with and without hostPaths; the
answers must be the same.
"""

from __future__ import annotations

import itertools
import random
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.chart.helm import notes
from webhook.guard.privilege import privilege_reasons

pytestmark = pytest.mark.chart

# Per field of the securityContext, values within baseline and beyond it (and shapes the API
# refuses: a reason too, in both). Each value is tried alone, then in seeded combinations.
FIELDS: dict[str, list[Any]] = {
    "privileged": [False, True, "true"],
    "allowPrivilegeEscalation": [False, True],  # baseline allows it: never a reason alone
    "runAsUser": [0, 1000],
    "capabilities": [
        {"drop": ["ALL"]},
        {"add": ["CHOWN", "KILL", "NET_BIND_SERVICE"]},  # within baseline
        {"add": ["SYS_PTRACE"]},
        {"add": ["BPF", "SETUID"]},  # one beyond baseline among baseline ones
        {"add": ["NET_RAW"]},  # a runtime default, but not in baseline's list
        {"add": ["CAP_KILL"]},  # compared as written: CAP_KILL is not KILL
        {"add": ["sys_admin"]},
        {"add": "SYS_ADMIN"},
        "ALL",
    ],
    "seccompProfile": [{"type": "RuntimeDefault"}, {"type": "Localhost",
                                                    "localhostProfile": "p.json"},
                       {"type": "Unconfined"}, {}],
    "appArmorProfile": [{"type": "RuntimeDefault"}, {"type": "Localhost",
                                                     "localhostProfile": "p"},
                        {"type": "Unconfined"}],
    "seLinuxOptions": [{"type": "container_t"}, {"type": "container_engine_t"},
                       {"level": "s0:c1,c2"}, {"type": None}, {"type": "spc_t"},
                       {"type": "unconfined_t"}, {"user": "system_u"}, {"role": "system_r"},
                       {"user": ""}],
    "procMount": ["Default", "Unmasked"],
    "windowsOptions": [{"hostProcess": False}, {"runAsUserName": "x"}, {"hostProcess": True},
                       "x"],
}
HOST_PATHS = [[], [{"name": "modules", "path": "/lib/modules"}]]


def generated_profiles() -> list[dict[str, Any]]:
    contexts: list[dict[str, Any]] = [{}]
    contexts += [{key: value} for key, values in FIELDS.items() for value in values]
    rng = random.Random(17)  # noqa: S311 - reproducible combinations, not a secret
    for _ in range(120):
        keys = rng.sample(sorted(FIELDS), rng.randint(2, 4))
        contexts.append({key: rng.choice(FIELDS[key]) for key in keys})
    profiles = []
    for number, (security_context, host_paths) in enumerate(
        itertools.product(contexts, HOST_PATHS)
    ):
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
        "AppArmor",
        "SELinux",
        "procMount",
        "Windows",
        "invalid",
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
