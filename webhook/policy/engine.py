"""The policy gate as the webhook, the controller, the results service and the CLI build it: one
object (one policy store, one set of caches) answering every kind of caller, each kind's
questions in a module of its own (see webhook.policy.gate)."""

from __future__ import annotations

from webhook.config import Settings
from webhook.kube.access import ClusterAPI, KubernetesClusterAPI
from webhook.policy.decision import Decisions
from webhook.policy.guard_questions import GuardQuestions
from webhook.policy.loader import RELOAD_CHECK_SECONDS, PolicyStore
from webhook.policy.namespace_labels import NamespaceLabelGate
from webhook.policy.rule_lookup import RuleLookup
from webhook.wire import constants


class PolicyGate(Decisions, GuardQuestions, NamespaceLabelGate, RuleLookup):
    """evaluate(PolicyRequest) -> PolicyResult: policy rules first, then RBAC, then the mode;
    and the guard's, the namespace-label gates' and the rule look-up's questions."""


def load_policy_engine(
    settings: Settings,
    cluster: ClusterAPI | None = None,
    *,
    role_prefix: str | None = None,
    check_interval: float = RELOAD_CHECK_SECONDS,
) -> PolicyGate:
    """The gate for `settings.policy_path` (file or directory; None = the built-in default policy,
    i.e. privileged profiles only with the RBAC grant, downgrade otherwise). Raises PolicyError
    naming file and line when the policy is invalid: the webhook must not start with it."""
    store = PolicyStore(settings.policy_path, settings.profiles, check_interval=check_interval)
    prefix = role_prefix or settings.profile_role_prefix or constants.DEFAULT_ROLE_PREFIX
    return PolicyGate(settings, store, cluster or KubernetesClusterAPI(), role_prefix=prefix)

