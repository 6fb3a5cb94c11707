"""Which policy rule covers a namespace and service account, and where it is written: the
question of the session-expiry controller and the schedules (webhook.controller), the results
service's planner and the CLI's session listing (their RuleSource protocol)."""

from __future__ import annotations

from webhook.kube.access import ClusterAPIError
from webhook.policy.gate import GateCore
from webhook.policy.model import RuleSettings


class RuleLookup(GateCore):
    """rule_for(namespace, service_account) -> (the rule's settings, where it is written)."""

    def rule_for(self, namespace: str, service_account: str) -> tuple[RuleSettings, str]:
        """The settings of the rule that covers this namespace and service account (the
        expiry controller's question), and where it is written. Raises ClusterAPIError when a
        namespaceSelector rule could not be evaluated: better no answer than the wrong rule."""
        policy = self.store.current()
        trace: list[str] = []
        rule, uncertain = self._match(policy, namespace, service_account, trace)
        if uncertain:
            raise ClusterAPIError(f"policy rules for namespace {namespace!r}: {trace[-1]}")
        if rule is None:
            return policy.defaults, f"the defaults ({policy.defaults_where})"
        return rule.settings, f"policy rule {rule.name!r} ({rule.where})"
