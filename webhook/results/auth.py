"""Who is calling the results service, and what they may see: TokenReview and
SubjectAccessReview, with the caller's own Kubernetes identity (the service's ServiceAccount only
asks the apiserver; it never lends its own rights).

- A **toolset's agent** sends its projected ServiceAccount token, bound to its pod and to the
  service's audience (webhook.inject.sidecar mounts it into the toolset container only). The
  TokenReview names the audience, so the token is useless against the apiserver itself and a
  token for another audience is refused here. Where the apiserver says which pod the token is
  bound to (user.extra authentication.kubernetes.io/pod-name and pod-uid), that pod is the
  caller; where it does not, the caller is the namespace and service account, and the pod it
  names (`X-Sidecar-Debug-Pod`) must run as that service account (documented as the weaker
  case: pods sharing a service account could push for each other).
- A **reader** sends a token for their own identity. Preferably one bound to the service's
  readers' audience (`<audience>/readers`, reader_audience): `sidecar-debug results open` asks
  the apiserver for one (TokenRequest) where the kubeconfig's identity is a service account
  that may request its own token, so the token is useless against the apiserver and against
  this service's agent routes. Such a token (its `aud` claim names that audience) is reviewed
  with that audience. Any other bearer token (the kubeconfig's own: OIDC, a static or legacy
  service account token) is reviewed with the apiserver's own audiences, as kubectl's would
  be; it is a credential the apiserver accepts, which this service then holds in memory for
  the request (docs/schedules.md says so). A namespace's runs are shown when a
  SubjectAccessReview allows the reader `get` on `debugresults.sidecar-debug.io` in that
  namespace (chart: the `<fullname>-results-reader` ClusterRole, aggregated into `view` unless
  results.readers.aggregateToView is false).

Tokens are never logged or stored: answers are cached for a few seconds, keyed by a hash of the
token (never the token itself), and no error message quotes one.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from webhook import constants
from webhook.errors import Refused
from webhook.kube.access import AccessCheck, ClusterAPIError, KubernetesClusterAPI, TTLCache

SERVICE_ACCOUNT_PREFIX = "system:serviceaccount:"
POD_HEADER = "X-Sidecar-Debug-Pod"
CALL_TIMEOUT = 5.0
MAX_TOKEN_BYTES = 16 * 1024
# A reader's audience-bound token names the service's audience with this suffix: a different
# audience from the agents', so a reader's token can never push runs.
READER_AUDIENCE_SUFFIX = "/readers"


def reader_audience(audience: str) -> str:
    """The audience of readers' bound tokens for a service of agent audience `audience`."""
    return audience + READER_AUDIENCE_SUFFIX


def jwt_claims(token: str) -> dict[str, Any]:
    """The claims of a JWT, NOT verified (only the apiserver verifies: TokenReview). Used to
    choose what to ask it, never to decide anything; {} for anything that is not a JWT."""
    parts = token.split(".")
    if len(parts) != 3 or len(parts[1]) > MAX_TOKEN_BYTES:
        return {}
    try:
        payload = base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4))
        claims = json.loads(payload)
    except (binascii.Error, ValueError):
        return {}
    return claims if isinstance(claims, dict) else {}


def token_audiences(token: str) -> tuple[str, ...]:
    """The `aud` claim of a JWT (unverified, see jwt_claims)."""
    audiences = jwt_claims(token).get("aud")
    if isinstance(audiences, str):
        return (audiences,)
    if isinstance(audiences, list):
        return tuple(a for a in audiences if isinstance(a, str))
    return ()


class AuthError(Refused):
    """The caller is not who may do this; `status` is the HTTP answer (401, 403, 503)."""


@dataclass(frozen=True)
class User:
    name: str
    uid: str
    groups: tuple[str, ...]
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def extra_value(self, key: str) -> str | None:
        for name, values in self.extra:
            if name == key and len(values) == 1:
                return values[0]
        return None


@dataclass(frozen=True)
class AgentIdentity:
    """The pod a toolset's token speaks for."""

    namespace: str
    service_account: str
    pod: str
    pod_uid: str | None  # None: the apiserver did not bind the token to a pod (see the doc)


class Reviewer(Protocol):
    """What this module asks the apiserver (webhook.kube.access.KubernetesClusterAPI)."""

    def token_review(self, token: str, audiences: tuple[str, ...], timeout: float
                     ) -> dict[str, Any]: ...

    def access_allowed(self, check: AccessCheck, timeout: float) -> bool: ...


class ReviewAPI(KubernetesClusterAPI):
    """The apiserver calls of the results service: the gate's SubjectAccessReview and namespace
    look-up, and TokenReviews (the webhook never reviews tokens: this lives here)."""

    def token_review(self, token: str, audiences: tuple[str, ...], timeout: float
                     ) -> dict[str, Any]:
        """The TokenReview's status for `token` (`audiences` empty: the apiserver's own)."""
        spec: dict[str, Any] = {"token": token}
        if audiences:
            spec["audiences"] = list(audiences)
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": spec}
        document = self._call("POST", "/apis/authentication.k8s.io/v1/tokenreviews", body,
                              timeout)
        status = document.get("status")
        return status if isinstance(status, dict) else {}


def bearer_token(header: str | None) -> str:
    """The token of an `Authorization: Bearer TOKEN` header; AuthError(401) without one."""
    if not header:
        raise AuthError(401, "no credentials: send your Kubernetes bearer token "
                        "(`sidecar-debug results open` does it for you)")
    scheme, _, token = header.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise AuthError(401, "the Authorization header must be `Bearer TOKEN`")
    if len(token) > MAX_TOKEN_BYTES or not token.isascii() or any(c.isspace() for c in token):
        raise AuthError(401, "the bearer token is not a token")
    return token


def _user(status: Mapping[str, Any]) -> User:
    raw = status.get("user")
    raw = raw if isinstance(raw, dict) else {}
    groups = raw.get("groups")
    extra = raw.get("extra")
    return User(
        name=str(raw.get("username") or ""),
        uid=str(raw.get("uid") or ""),
        groups=tuple(str(g) for g in groups) if isinstance(groups, list) else (),
        extra=tuple(sorted(
            (str(k), tuple(str(v) for v in vs))
            for k, vs in (extra.items() if isinstance(extra, dict) else ())
            if isinstance(vs, list))),
    )


def _key(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class Authenticator:
    def __init__(self, reviewer: Reviewer, audience: str, cache_seconds: float = 10.0) -> None:
        self.reviewer = reviewer
        self.audience = audience
        self._tokens = TTLCache(cache_seconds)
        self._access = TTLCache(cache_seconds)

    def _review(self, token: str, audiences: tuple[str, ...]) -> User:
        key = (_key(token), audiences)
        hit, cached = self._tokens.get(key)
        if hit:
            if cached is None:
                raise AuthError(401, "the token was not accepted by the Kubernetes API")
            user: User = cached
            return user
        try:
            status = self.reviewer.token_review(token, audiences, CALL_TIMEOUT)
        except ClusterAPIError as error:
            raise AuthError(503, f"cannot check the token now: {error}") from error
        authenticated = status.get("authenticated") is True and not status.get("error")
        if authenticated and audiences:
            # An apiserver that ignores audiences would answer without them: refuse then.
            answered = status.get("audiences")
            authenticated = isinstance(answered, list) and bool(set(audiences) & set(answered))
        found = _user(status) if authenticated else None
        self._tokens.put(key, found)
        if found is None or not found.name:
            raise AuthError(401, "the token was not accepted by the Kubernetes API")
        return found

    # --- readers --------------------------------------------------------------------------

    @property
    def reader_audience(self) -> str:
        return reader_audience(self.audience)

    def reader(self, header: str | None) -> User:
        """The reader a token speaks for: reviewed with the readers' audience when it claims
        it (a token from `results open`'s TokenRequest), else with the apiserver's own."""
        token = bearer_token(header)
        if self.reader_audience in token_audiences(token):
            return self._review(token, (self.reader_audience,))
        return self._review(token, ())

    def can_read(self, user: User, namespace: str) -> bool:
        key = (user.name, user.uid, user.groups, user.extra, namespace)
        hit, cached = self._access.get(key)
        if hit:
            return bool(cached)
        check = AccessCheck(user=user.name, groups=user.groups, namespace=namespace,
                            resource_name="", extra=user.extra, uid=user.uid,
                            verb=constants.RESULTS_READ_VERB,
                            resource=constants.RESULTS_READ_RESOURCE)
        try:
            allowed = self.reviewer.access_allowed(check, CALL_TIMEOUT)
        except ClusterAPIError as error:
            raise AuthError(503, f"cannot check access to namespace {namespace} now: "
                            f"{error}") from error
        self._access.put(key, allowed)
        return allowed

    # --- agents ---------------------------------------------------------------------------

    def agent(self, header: str | None, claimed_pod: str | None) -> AgentIdentity:
        user = self._review(bearer_token(header), (self.audience,))
        if not user.name.startswith(SERVICE_ACCOUNT_PREFIX):
            raise AuthError(403, f"{user.name} is not a service account: only a toolset's "
                            "projected token may push runs")
        namespace, _, account = user.name.removeprefix(SERVICE_ACCOUNT_PREFIX).partition(":")
        pod = user.extra_value(constants.EXTRA_POD_NAME)
        uid = user.extra_value(constants.EXTRA_POD_UID)
        if pod and uid:
            if claimed_pod and claimed_pod != pod:
                raise AuthError(403, f"the token is bound to pod {namespace}/{pod}, not "
                                f"{claimed_pod}")
            return AgentIdentity(namespace, account, pod, uid)
        if not claimed_pod:
            raise AuthError(403, "the token is not bound to a pod and names none: send the "
                            f"pod's name in {POD_HEADER}")
        return AgentIdentity(namespace, account, claimed_pod, None)
