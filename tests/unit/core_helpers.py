"""Helpers shared by the core unit tests: settings, AdmissionReviews, Kubernetes schema checks."""

from __future__ import annotations

import copy
import datetime as dt
import functools
import uuid
from typing import Any

import kubernetes_validate

from webhook.admission.mutate import Mutator
from webhook.admission.review import API_VERSION, KIND, Response, Review
from webhook.config import Settings, load_settings
from webhook.inject.patch import apply_patch
from webhook.policy.api import AllowAll

# Schemas of a current Kubernetes (kubernetes-validate ships them); strict = unknown fields fail.
K8S_SCHEMA_VERSION = "1.30"


@functools.cache
def default_settings() -> Settings:
    return load_settings(environ={})


def settings_with(**overrides: Any) -> Settings:
    return load_settings(environ={}, overrides=overrides)


def admission_review(
    pod: dict[str, Any],
    namespace: str = "demo",
    operation: str = "CREATE",
    username: str = "system:serviceaccount:kube-system:replicaset-controller",
    dry_run: bool = False,
    groups: tuple[str, ...] = ("system:serviceaccounts",),
) -> dict[str, Any]:
    """An AdmissionReview for `pod` as the apiserver sends one (bench/pods.py uses it too)."""
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
            "requestResource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": namespace,
            "operation": operation,
            "userInfo": {"username": username, "groups": list(groups)},
            "object": copy.deepcopy(pod),
            "oldObject": None,
            "dryRun": dry_run,
            "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"},
        },
    }


def review_around(response: dict[str, Any]) -> Review:
    """The typed AdmissionReview around a response read as plain JSON (a reply body's
    "response", or a copy taken as a dict), for decode_patch: uid, allowed and the patch."""
    typed: Response = {"uid": response["uid"], "allowed": response["allowed"]}
    if "patch" in response:
        typed["patch"] = response["patch"]
    return {"apiVersion": API_VERSION, "kind": KIND, "response": typed}


# The admission time of the goldens' sessions (SIDECAR_DEBUG_SESSION_STARTED), fixed.
ADMITTED = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)


def mutator(settings: Settings | None = None) -> Mutator:
    return Mutator(settings or default_settings(), AllowAll(grant="test", clock=lambda: ADMITTED))


def injected(
    pod: dict[str, Any],
    namespace: str = "demo",
    settings: Settings | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(patched pod, AdmissionReview response) through the full review path."""
    from webhook.admission.review import decode_patch

    review = mutator(settings).review(admission_review(pod, namespace))
    return apply_patch(pod, decode_patch(review)), dict(review["response"])


def validate_pod(pod: dict[str, Any]) -> None:
    """Raise AssertionError with the first line of the schema error when `pod` is invalid."""
    document = {"apiVersion": "v1", "kind": "Pod", **pod}
    document.setdefault("metadata", {}).setdefault("name", "schema-check")
    try:
        kubernetes_validate.validate(document, K8S_SCHEMA_VERSION, strict=True)
    except kubernetes_validate.ValidationError as exc:
        raise AssertionError(str(exc).splitlines()[0]) from None
