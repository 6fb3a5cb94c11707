"""Who asks: the requester of an API call as the apiserver authenticated it.

Its own module so that the pure core (injection, policy) names a requester without importing the
AdmissionReview wire layer (webhook.admission), which merely carries it.
"""

from __future__ import annotations

from typing import TypedDict


class UserInfo(TypedDict, total=False):
    """authentication.k8s.io/v1 UserInfo, as AdmissionReview and TokenReview carry it."""

    username: str
    uid: str
    groups: list[str]
    extra: dict[str, list[str]]
