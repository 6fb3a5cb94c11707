"""Assemble the served application: settings, logging, policy engine, namespace gate."""

from __future__ import annotations

import os
from typing import Any

from webhook import logs
from webhook.admission import review as admission
from webhook.admission.namespace import review_namespace
from webhook.admission.review import Review
from webhook.config import Settings, load_settings
from webhook.policy.gate import PolicyGate, load_policy_engine
from webhook.server.routes import NamespaceReviewer, WebhookApp, create_app


def load_policy(settings: Settings) -> PolicyGate:
    """The policy gate for settings.policy_path (the built-in default policy when unset)."""
    return load_policy_engine(settings, role_prefix=settings.profile_role_prefix)


def namespace_gate(policy: PolicyGate) -> NamespaceReviewer:
    def review(body: Any) -> Review:
        if not isinstance(body, dict) or not isinstance(body.get("request"), dict):
            return admission.build_response(
                None, allowed=True, message="body is not an AdmissionReview with a request"
            )
        return review_namespace(body["request"], policy)

    return review


def build_app(settings: Settings | None = None) -> WebhookApp:
    settings = settings or load_settings()
    logs.configure(settings.log_level)
    policy = load_policy(settings)

    def readiness() -> str | None:
        for path in (settings.tls_cert_file, settings.tls_key_file):
            if path and not os.path.exists(path):
                return f"serving certificate file {path} is missing"
        return None

    return create_app(settings, policy, namespace_gate(policy), readiness)
