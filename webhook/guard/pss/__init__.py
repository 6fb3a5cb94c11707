"""The Pod Security Standards, `baseline` and `restricted`, as Kubernetes' Pod Security admission
checks them: pure functions on a Pod's plain data.

The checks, their IDs, field semantics and messages follow kubernetes/pod-security-admission's
`policy/check_*.go` of Kubernetes 1.37, with each check's version history as Pod Security keeps
it (a check has versions: the policy version from which each implementation applies). `latest`
is the newest policy version of any check (v1.37: the sysctls `tcp_slow_start_after_idle` and
`tcp_notsent_lowat`), and so is any newer version asked for; `v1.N` applies the checks as they
were at N: host probes from 1.34, the `hostUsers: false` relaxations from 1.35,
`container_engine_t` from 1.31, the sysctls by version (1.27, 1.29, 1.32, 1.37), the Windows
exemptions from 1.25. AppArmor fields and annotations and image volumes apply at every version
(PSA patched them into the 1.0 implementations), and a volume with no source is an emptyDir
(the apiserver defaults it so before admission). Every container kind is checked
(initContainers, containers, ephemeralContainers, in that order, as PSA visits them), and the
pod-level fields.

Where the API would refuse a value PSA never sees (a string for a boolean, a list for an
object, duplicate volume names), the check fails closed: the value is reported, never taken for
"unset". Two deliberate additions to PSA, both stricter: the old seccomp annotations are checked
at every level (Kubernetes 1.20's kubelet still honours them), and a Windows pod (`spec.os`) is
spared only restricted's own additions, never the baseline checks restricted replaces.

`check_pod` returns the violations, each with its check ID, the field path, the container and a
one-line message; `evaluate` also gives Pod Security's own summary, naming the version applied
(`violates PodSecurity "baseline:latest (v1.37)": privileged (container "x" must not set
securityContext.privileged=true)`; `"baseline:v1.20"` when pinned).

The package has the shape of Kubernetes' own `pod-security-admission/policy`: one module per
check (`check_*.py`, each registering its `CHECK`), the registry that validates and orders them
(`registry.py`, as `registry.go`), the pod reader (`pod.py`), the findings (`model.py`), the
versions (`version.py`) and the wording (`messages.py`). Callers use what this module exports.
"""

from webhook.guard.pss.check_app_armor_profile import APPARMOR_ANNOTATION_PREFIX
from webhook.guard.pss.check_seccomp_profile_baseline import (
    SECCOMP_CONTAINER_ANNOTATION_PREFIX,
    SECCOMP_POD_ANNOTATION,
)
from webhook.guard.pss.checks import Check
from webhook.guard.pss.messages import join_quote, quote, shown
from webhook.guard.pss.model import (
    CONTAINER_KINDS,
    LEVELS,
    MALFORMED,
    NO_EXEMPTION,
    ContainerRef,
    Exemption,
    Finding,
    Level,
    PodSecurityResult,
    Violation,
)
from webhook.guard.pss.registry import CHECKS, NEWEST, check_pod, checks_for, evaluate, resolve
from webhook.guard.pss.version import LATEST, PolicyVersion, Version, parse_version

__all__ = [
    "APPARMOR_ANNOTATION_PREFIX",
    "CHECKS",
    "CONTAINER_KINDS",
    "LEVELS",
    "MALFORMED",
    "NO_EXEMPTION",
    "SECCOMP_CONTAINER_ANNOTATION_PREFIX",
    "SECCOMP_POD_ANNOTATION",
    "LATEST",
    "NEWEST",
    "PolicyVersion",
    "Version",
    "parse_version",
    "resolve",
    "Check",
    "ContainerRef",
    "Exemption",
    "Finding",
    "Level",
    "PodSecurityResult",
    "Violation",
    "check_pod",
    "checks_for",
    "evaluate",
    "join_quote",
    "quote",
    "shown",
]
