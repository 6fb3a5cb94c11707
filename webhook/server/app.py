"""The application factory: `create_app(settings)` builds the Flask app gunicorn serves.

One blueprint (webhook.server.routes) with the endpoints and the refusals; the review itself is
webhook.admission.mutate.Mutator, the namespace-label gate webhook.admission.namespace.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from flask import Flask

from webhook.admission import review as admission
from webhook.admission.mutate import Mutator
from webhook.admission.namespace import review_namespace
from webhook.admission.review import Review
from webhook.config import Settings, load_settings
from webhook.policy.api import PolicyEngine
from webhook.policy.gate import PolicyGate, load_policy_engine
from webhook.server.routes import EXTENSION, NamespaceReviewer, WebhookState, blueprint


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


def serving_files_readiness(settings: Settings) -> Callable[[], str | None]:
    """Ready while the serving certificate and key files exist (they are rotated in place)."""

    def readiness() -> str | None:
        for path in (settings.tls_cert_file, settings.tls_key_file):
            if path and not os.path.exists(path):
                return f"serving certificate file {path} is missing"
        return None

    return readiness


def create_app(
    settings: Settings | None = None,
    policy: PolicyEngine | None = None,
    namespace_reviewer: NamespaceReviewer | None = None,
    readiness: Callable[[], str | None] | None = None,
) -> Flask:
    """The webhook as a Flask app. With only `settings` (read from the environment when None)
    it is the served webhook: the configured policy gate, its namespace-label gate and the
    serving-files readiness; tests pass their own policy (then no namespace gate unless given)."""
    settings = settings or load_settings()
    if policy is None:
        gate = load_policy(settings)
        policy = gate
        namespace_reviewer = namespace_reviewer or namespace_gate(gate)
    app = Flask(__name__)
    app.extensions[EXTENSION] = WebhookState(
        settings=settings,
        mutator=Mutator(settings, policy),
        namespace_reviewer=namespace_reviewer,
        readiness=readiness or serving_files_readiness(settings),
    )
    app.register_blueprint(blueprint)
    return app
