"""The AdmissionReview wire format (admission.k8s.io/v1) as TypedDicts, and response builders.

Modelled on kopf's `structs/reviews.py` and `engines/admission.py`: echo apiVersion, kind and
uid; attach a patch only when it is non-empty; errors travel as status{code, message}.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any, Literal, NotRequired, TypedDict

from webhook.wire import jsonio, shape
from webhook.wire.identity import UserInfo

API_VERSION = "admission.k8s.io/v1"
KIND = "AdmissionReview"
HANDLED_API_VERSIONS = ("admission.k8s.io/v1", "admission.k8s.io/v1beta1")

Operation = Literal["CREATE", "UPDATE", "DELETE", "CONNECT"]


class GroupVersionKind(TypedDict, total=False):
    group: str
    version: str
    kind: str


class GroupVersionResource(TypedDict, total=False):
    group: str
    version: str
    resource: str


class Request(TypedDict, total=False):
    uid: str
    kind: GroupVersionKind
    resource: GroupVersionResource
    subResource: str
    requestKind: GroupVersionKind
    requestResource: GroupVersionResource
    name: str
    namespace: str
    operation: Operation
    userInfo: UserInfo
    object: dict[str, Any]
    oldObject: dict[str, Any] | None
    dryRun: bool
    options: dict[str, Any]


class Status(TypedDict, total=False):
    code: int
    message: str
    reason: str


class Response(TypedDict):
    uid: str
    allowed: bool
    warnings: NotRequired[list[str]]
    status: NotRequired[Status]
    patch: NotRequired[str]
    patchType: NotRequired[Literal["JSONPatch"]]
    auditAnnotations: NotRequired[dict[str, str]]


class Review(TypedDict):
    apiVersion: str
    kind: str
    request: NotRequired[Request]
    response: NotRequired[Response]


def build_response(
    request: Request | None,
    *,
    allowed: bool = True,
    patch: list[dict[str, Any]] | None = None,
    message: str | None = None,
    code: int | None = None,
    warnings: list[str] | None = None,
    audit: dict[str, str] | None = None,
    api_version: str = API_VERSION,
) -> Review:
    """An AdmissionReview answering `request`; the patch is attached only when non-empty."""
    uid = str((request or {}).get("uid", ""))
    response: Response = {"uid": uid, "allowed": allowed}
    if patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(jsonio.dumps(patch)).decode()
    if message is not None or code is not None:
        status: Status = {}
        if code is not None:
            status["code"] = code
        if message is not None:
            status["message"] = message
        response["status"] = status
    if warnings:
        response["warnings"] = warnings
    if audit:
        response["auditAnnotations"] = audit
    return {"apiVersion": api_version, "kind": KIND, "response": response}


def decode_patch(review: Review) -> list[dict[str, Any]]:
    """The JSONPatch inside a response (tests and `inject` use it); [] when there is none."""
    response: dict[str, Any] = dict(review.get("response") or {})
    encoded = response.get("patch")
    if not encoded:
        return []
    result: list[dict[str, Any]] = json.loads(base64.b64decode(encoded))
    return result


@dataclass(frozen=True)
class Envelope:
    """A body read as an AdmissionReview: its request, or why there is none (reason, message).
    `malformed`: the request is there but its fields have the wrong types (which the apiserver
    never sends; a client calling the webhook directly can)."""

    request: Request | None
    api_version: str = API_VERSION
    reason: str = ""
    message: str = ""
    malformed: bool = False


def read_envelope(body: Any) -> Envelope:
    if not isinstance(body, dict) or body.get("kind") != KIND:
        return Envelope(
            None, reason="not-admission-review",
            message="body is not an AdmissionReview (kind: AdmissionReview)",
        )
    if body.get("apiVersion") not in HANDLED_API_VERSIONS:
        return Envelope(
            None, reason="unsupported-api-version",
            message=f"apiVersion {body.get('apiVersion')!r} is not handled; send {API_VERSION}",
        )
    request = body.get("request")
    if not isinstance(request, dict):
        return Envelope(None, reason="no-request", message="AdmissionReview has no request")
    problem = shape.problem(request, shape.ENVELOPE, "request")
    if problem is not None:
        return Envelope(
            None, body["apiVersion"], "malformed-request",
            f"cannot read the AdmissionReview: {problem}", malformed=True,
        )
    return Envelope(request, body["apiVersion"])  # type: ignore[arg-type]


def echo_uid(body: Any) -> Request | None:
    """Best effort: echo a uid even from a malformed envelope, so the apiserver can match it."""
    if isinstance(body, dict) and isinstance(body.get("request"), dict):
        uid = body["request"].get("uid")
        if isinstance(uid, str):
            return {"uid": uid}
    return None
