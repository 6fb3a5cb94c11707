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
from webhook.admission.guard import PodGuard
from webhook.admission.mutate import Mutator
from webhook.admission.namespace import (
    review_namespace,
    review_namespace_guard,
    review_namespace_name,
)
from webhook.admission.review import Review
from webhook.config import Settings, load_settings
from webhook.policy.api import PolicyEngine
from webhook.policy.engine import PolicyGate, load_policy_engine
from webhook.server.routes import (
    EXTENSION,
    NamespaceReviewer,
    PodValidator,
    WebhookState,
    blueprint,
)


def load_policy(settings: Settings) -> PolicyGate:
    """The policy gate for settings.policy_path (the built-in default policy when unset)."""
    return load_policy_engine(settings, role_prefix=settings.profile_role_prefix)


def namespace_gate(
    policy: PolicyGate,
    review_request: Callable[[admission.Request, PolicyGate], Review] = review_namespace,
) -> NamespaceReviewer:
    """A namespace review (the opt-in label's gate; `review_namespace_guard` for the guard
    label's) as the route calls it, with the body as read."""

    def review(body: Any) -> Review:
        if not isinstance(body, dict) or not isinstance(body.get("request"), dict):
            return admission.build_response(
                None, allowed=True, message="body is not an AdmissionReview with a request"
            )
        return review_request(body["request"], policy)

    return review


def namespace_name_gate(body: Any) -> Review:
    """The name label's gate (`review_namespace_name`, no policy needed) as the route calls it."""
    if not isinstance(body, dict) or not isinstance(body.get("request"), dict):
        return admission.build_response(
            None, allowed=True, message="body is not an AdmissionReview with a request"
        )
    return review_namespace_name(body["request"])


def serving_files_readiness(settings: Settings) -> Callable[[], str | None]:
    """Ready while the serving certificate and key files exist (they are rotated in place)."""

    def readiness() -> str | None:
        for path in (settings.tls_cert_file, settings.tls_key_file):
            if path and not os.path.exists(path):
                return f"serving certificate file {path} is missing"
        return None

    return readiness


def serving_files(settings: Settings) -> tuple[str, str]:
    """What `sidecar-debug serve` checks before gunicorn starts, so that a broken policy or an
    unusable certificate stops start-up with one line naming the file (the command's error
    table) rather than a traceback from gunicorn or every worker. Returns the certificate and
    key files to serve (`self` mode: written from the Secret)."""
    import ssl

    from webhook.certs import rotation, tls
    from webhook.certs.pki import CertificateError

    load_policy(settings)
    cert_file, key_file = rotation.prepare_serving_files(settings)
    for setting, path in (("tlsCertFile", cert_file), ("tlsKeyFile", key_file)):
        if not os.path.isfile(path) or not os.access(path, os.R_OK):
            problem = "cannot be read" if os.path.exists(path) else "does not exist"
            raise CertificateError(
                f"{setting} {path} {problem}; mount the serving certificate Secret there, "
                "or set certificatesMode self to let the webhook make one"
            )
    try:
        tls.server_context(cert_file, key_file)
    except (ssl.SSLError, ValueError) as exc:
        raise CertificateError(_unusable_pair(cert_file, key_file, exc)) from exc
    return cert_file, key_file


def _unusable_pair(cert_file: str, key_file: str, error: Exception) -> str:
    """Which of the two files TLS refused, and why."""
    from pathlib import Path

    from webhook.certs import pki

    try:
        cert = pki.load_certificates(Path(cert_file).read_bytes())[0]
    except pki.CertificateError as exc:
        return f"tlsCertFile {cert_file}: {exc}"
    try:
        key = pki.load_private_key(Path(key_file).read_bytes())
    except pki.CertificateError as exc:
        return f"tlsKeyFile {key_file}: {exc}"
    if not pki.key_matches(cert, key):
        return f"tlsKeyFile {key_file} is not the key of tlsCertFile {cert_file}"
    return f"{cert_file}, {key_file}: {getattr(error, 'reason', None) or error}"


def create_app(
    settings: Settings | None = None,
    policy: PolicyEngine | None = None,
    namespace_reviewer: NamespaceReviewer | None = None,
    readiness: Callable[[], str | None] | None = None,
    pod_validator: PodValidator | None = None,
    namespace_guard_reviewer: NamespaceReviewer | None = None,
) -> Flask:
    """The webhook as a Flask app. With only `settings` (read from the environment when None)
    it is the served webhook: the configured policy gate, its namespace-label gates, the guard
    and the serving-files readiness; tests pass their own policy (then no namespace gate and
    no guard unless given)."""
    settings = settings or load_settings()
    if policy is None:
        gate = load_policy(settings)
        policy = gate
        namespace_reviewer = namespace_reviewer or namespace_gate(gate)
        namespace_guard_reviewer = namespace_guard_reviewer or namespace_gate(
            gate, review_namespace_guard
        )
        pod_validator = pod_validator or PodGuard(settings, gate).review
    app = Flask(__name__)
    app.extensions[EXTENSION] = WebhookState(
        settings=settings,
        mutator=Mutator(settings, policy),
        namespace_reviewer=namespace_reviewer,
        namespace_guard_reviewer=namespace_guard_reviewer,
        pod_validator=pod_validator,
        namespace_name_reviewer=namespace_name_gate,
        readiness=readiness or serving_files_readiness(settings),
    )
    app.register_blueprint(blueprint)
    return app
