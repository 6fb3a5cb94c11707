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

Answers are cached, keyed by a hash of the token (never the token itself). A reader's review
and access checks for a few seconds. An agent's identity for as long as it can hold: its token
is valid until its `exp` and speaks only for its pod, so the review is reused until the token
expires (at most AGENT_CACHE_SECONDS) and dropped the moment the service sees the pod deleted
(`forget_pod`, from the pod watch). Each use is still checked against the pod the service
watches (`Service.agent_pod`: same uid, same service account), so a new pod reusing the name
never inherits the old identity. At the agent's 20 s poll this turns one TokenReview per poll
into one per token rotation (the kubelet renews at 80 % of `expirationSeconds`, 1 h by default).
Tokens are never logged or stored: answers are cached for a few seconds, keyed by a hash of the
token (never the token itself), and no error message quotes one.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from webhook.errors import Refused
from webhook.kube.access import AccessCheck, ClusterAPIError, KubernetesClusterAPI, TTLCache
from webhook.results import metrics
from webhook.wire import constants

SERVICE_ACCOUNT_PREFIX = "system:serviceaccount:"
POD_HEADER = "X-Sidecar-Debug-Pod"
CALL_TIMEOUT = 5.0
MAX_TOKEN_BYTES = 16 * 1024
# An agent's review is reused at most this long, and never past the token's own expiry.
AGENT_CACHE_SECONDS = 3600.0
# Room for every toolset of a large cluster (each holds one token, two across a rotation); the
# oldest entry goes first beyond it, never the whole cache at once.
AGENT_CACHE_ENTRIES = 65536
# Stop reusing a review this long before the token's `exp`, so clocks a little apart never let
# an expired token through.
EXPIRY_MARGIN_SECONDS = 30.0
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


def token_expiry(token: str) -> float | None:
    """The `exp` claim (Unix seconds) of a JWT, read without checking the signature: only used
    to bound how long the apiserver's verdict on that very token is reused, after the apiserver
    has accepted it (a forged `exp` would have failed the review). None when there is none."""
    parts = token.split(".")
    if len(parts) != 3 or len(parts[1]) > 8192:
        return None
    try:
        payload = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except (ValueError, binascii.Error, RecursionError):
        return None
    exp = payload.get("exp") if isinstance(payload, dict) else None
    return float(exp) if isinstance(exp, int) and not isinstance(exp, bool) else None


class AgentCache:
    """Agents' identities by token hash, each until its deadline (monotonic), and by pod uid so
    a deleted pod's entries go at once. Bounded: the oldest entry goes first."""

    def __init__(self, max_entries: int = AGENT_CACHE_ENTRIES,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.max_entries = max_entries
        self.clock = clock
        self._lock = threading.Lock()
        self._entries: OrderedDict[str, tuple[float, AgentIdentity]] = OrderedDict()
        self._by_uid: dict[str, set[str]] = {}

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def get(self, key: str) -> AgentIdentity | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            if self.clock() >= entry[0]:
                self._drop(key)
                return None
            return entry[1]

    def put(self, key: str, identity: AgentIdentity, seconds: float) -> None:
        if seconds <= 0 or identity.pod_uid is None:
            return
        with self._lock:
            self._drop(key)
            while len(self._entries) >= self.max_entries:
                self._drop(next(iter(self._entries)))
            self._entries[key] = (self.clock() + seconds, identity)
            self._by_uid.setdefault(identity.pod_uid, set()).add(key)

    def forget_pod(self, uid: str) -> int:
        """Drop every identity bound to the pod `uid`; how many there were."""
        with self._lock:
            keys = self._by_uid.pop(uid, set())
            for key in keys:
                self._entries.pop(key, None)
            return len(keys)

    def _drop(self, key: str) -> None:
        entry = self._entries.pop(key, None)
        if entry is not None and entry[1].pod_uid is not None:
            keys = self._by_uid.get(entry[1].pod_uid)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self._by_uid[entry[1].pod_uid]


class Authenticator:
    def __init__(self, reviewer: Reviewer, audience: str, cache_seconds: float = 10.0,
                 clock: Callable[[], float] = time.monotonic,
                 wall_clock: Callable[[], float] = time.time) -> None:
        self.reviewer = reviewer
        self.audience = audience
        self.wall_clock = wall_clock
        self._tokens = TTLCache(cache_seconds, clock=clock)
        self._access = TTLCache(cache_seconds, clock=clock)
        self.agents = AgentCache(clock=clock)

    def forget_pod(self, uid: str) -> int:
        """The pod `uid` is gone: none of its tokens' reviews is reused any more."""
        forgotten = self.agents.forget_pod(uid)
        metrics.AGENT_IDENTITIES.set(len(self.agents))
        return forgotten

    def _review(self, token: str, audiences: tuple[str, ...]) -> User:
        key = (_key(token), audiences)
        hit, cached = self._tokens.get(key)
        if hit:
            if cached is None:
                raise AuthError(401, "the token was not accepted by the Kubernetes API")
            user: User = cached
            return user
        metrics.TOKEN_REVIEWS.labels(caller="agent" if audiences else "reader").inc()
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
        token = bearer_token(header)
        key = _key(token)
        cached = self.agents.get(key)
        if cached is not None:
            if claimed_pod and claimed_pod != cached.pod:
                raise AuthError(403, f"the token is bound to pod {cached.namespace}/"
                                f"{cached.pod}, not {claimed_pod}")
            return cached
        identity = self._agent(token, claimed_pod)
        expiry = token_expiry(token)
        if expiry is not None:
            seconds = min(AGENT_CACHE_SECONDS,
                          expiry - EXPIRY_MARGIN_SECONDS - self.wall_clock())
            self.agents.put(key, identity, seconds)
            metrics.AGENT_IDENTITIES.set(len(self.agents))
        return identity

    def _agent(self, token: str, claimed_pod: str | None) -> AgentIdentity:
        user = self._review(token, (self.audience,))
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
