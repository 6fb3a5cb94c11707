"""Who may change a namespace's labels that open it to injection or put it under the guard: the
policy gate's answer to the namespace-label gates (webhook.admission.namespace), one
SubjectAccessReview for the requester (verb `use` on debugprofiles `namespace-opt-in` or
`namespace-guard`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from webhook.kube.access import user_check
from webhook.policy.gate import GateCore, dns_safe
from webhook.wire import constants


class NamespaceLabelGate(GateCore):
    """may_opt_in_namespace and may_change_namespace_guard: (allowed, reason, message)."""

    def may_opt_in_namespace(
        self, user: Mapping[str, Any], namespace: str
    ) -> tuple[bool, str, str]:
        """(allowed, reason, message) for labelling `namespace` with the opt-in label."""
        label = f"{self.settings.label_key}={self.settings.label_enabled}"
        return self._may_label_namespace(
            user,
            namespace,
            constants.NAMESPACE_OPT_IN_GRANT,
            f"labelling namespace {namespace!r} {label}",
            "opens it to debug sidecar injection",
            allowed=f"may open namespace {namespace!r} to debug sidecars",
            binding="opt-in",
        )

    def may_change_namespace_guard(
        self, user: Mapping[str, Any], namespace: str, change: str
    ) -> tuple[bool, str, str]:
        """(allowed, reason, message) for a label change that makes the guard hold `namespace`
        differently (`change` says how, e.g. "removing sidecar-debug.io/guard=restricted")."""
        return self._may_label_namespace(
            user,
            namespace,
            constants.NAMESPACE_GUARD_GRANT,
            f"{change} on namespace {namespace!r}",
            "changes how the guard holds its pods to Pod Security",
            allowed=f"may change how the guard holds namespace {namespace!r}",
            binding="guard",
        )

    def _may_label_namespace(
        self,
        user: Mapping[str, Any],
        namespace: str,
        grant_name: str,
        what: str,
        effect: str,
        *,
        allowed: str,
        binding: str,
    ) -> tuple[bool, str, str]:
        """Whether the requester holds `use` on debugprofiles `grant_name` in `namespace`."""
        trace: list[str] = []
        verdict = self._access(user_check(user, namespace, grant_name), trace, [0])
        username = str(user.get("username", ""))
        if verdict is True:
            return True, "granted-user", f"{username} {allowed}"
        grant = f"verb 'use' on debugprofiles.{constants.RBAC_GROUP} {grant_name!r}"
        if isinstance(verdict, str):
            return (
                False,
                "rbac-check-failed",
                f"{what} needs {grant}, and the check failed ({verdict}); try again",
            )
        return (
            False,
            "no-rbac-grant",
            (
                f"{what} {effect} and needs {grant}, which {username!r} lacks. A cluster "
                f"admin can grant it: kubectl create clusterrolebinding "
                f"sidecar-debug-{binding}-{dns_safe(username)} "
                f"--clusterrole={self.role_prefix}{grant_name} --user={username}"
            ),
        )
