"""The results service's agent identities: one TokenReview per token, not per poll, reused only
while the token is valid and its pod exists (issue 25's fleet target: fewer than 5 TokenReviews
a second from 5,000 toolsets polling every 20 s)."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from webhook.kube.access import AccessCheck
from webhook.results.auth import (
    EXPIRY_MARGIN_SECONDS,
    AgentCache,
    AgentIdentity,
    Authenticator,
    AuthError,
    token_expiry,
)
from webhook.results.mirror import Mirror
from webhook.wire import constants

AUDIENCE = "sidecar-debug.io/results/results-system/rs"
NOW = 1_800_000_000.0


def jwt(payload: Any) -> str:
    def part(value: Any) -> str:
        raw = value if isinstance(value, bytes) else json.dumps(value).encode()
        return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()
    return f"{part({'alg': 'RS256'})}.{part(payload)}.c2lnbmF0dXJl"


class Reviewer:
    """Answers as Kubernetes 1.20 does for a bound projected token (user.extra names the pod)."""

    def __init__(self, pods: dict[str, tuple[str, str]]) -> None:
        self.pods = pods  # token -> (pod name, pod uid)
        self.reviews = 0

    def token_review(self, token: str, audiences: tuple[str, ...], timeout: float
                     ) -> dict[str, Any]:
        self.reviews += 1
        if token not in self.pods:
            return {"authenticated": False, "error": "invalid bearer token"}
        pod, uid = self.pods[token]
        return {"authenticated": True, "audiences": list(audiences), "user": {
            "username": "system:serviceaccount:shop:web", "uid": "sa-uid",
            "groups": ["system:serviceaccounts"],
            "extra": {constants.EXTRA_POD_NAME: [pod], constants.EXTRA_POD_UID: [uid]}}}

    def access_allowed(self, check: AccessCheck, timeout: float) -> bool:
        return False


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def authenticator(reviewer: Reviewer, clock: Clock) -> Authenticator:
    return Authenticator(reviewer, AUDIENCE, clock=clock, wall_clock=lambda: NOW + clock.now)


def header(token: str) -> str:
    return f"Bearer {token}"


def test_a_toolset_polling_for_its_tokens_life_costs_one_token_review() -> None:
    token = jwt({"exp": int(NOW) + 3600, "sub": "system:serviceaccount:shop:web"})
    reviewer, clock = Reviewer({token: ("web-1", "uid-1")}), Clock()
    auth = authenticator(reviewer, clock)
    for poll in range(170):  # 20 s apart: 56 min 40 s
        clock.now = poll * 20.0
        identity = auth.agent(header(token), None)
        assert identity == AgentIdentity("shop", "web", "web-1", "uid-1")
    assert reviewer.reviews == 1


def test_a_review_is_not_reused_past_the_tokens_expiry() -> None:
    token = jwt({"exp": int(NOW) + 600})
    reviewer, clock = Reviewer({token: ("web-1", "uid-1")}), Clock()
    auth = authenticator(reviewer, clock)
    auth.agent(header(token), None)
    clock.now = 600 - EXPIRY_MARGIN_SECONDS - 1
    auth.agent(header(token), None)
    assert reviewer.reviews == 1
    clock.now = 600 - EXPIRY_MARGIN_SECONDS + 1
    auth.agent(header(token), None)  # the apiserver decides again (here: still accepts)
    assert reviewer.reviews == 2


@pytest.mark.parametrize("payload", [{"sub": "x"}, {"exp": "soon"}, {"exp": True}, [1, 2]])
def test_a_token_without_a_readable_expiry_is_reviewed_again_after_seconds(
        payload: Any) -> None:
    token = jwt(payload)
    reviewer, clock = Reviewer({token: ("web-1", "uid-1")}), Clock()
    auth = authenticator(reviewer, clock)
    auth.agent(header(token), None)
    assert len(auth.agents) == 0
    assert token_expiry(token) is None


def test_a_deleted_pods_tokens_are_reviewed_again() -> None:
    token = jwt({"exp": int(NOW) + 3600})
    reviewer, clock = Reviewer({token: ("web-1", "uid-1")}), Clock()
    auth = authenticator(reviewer, clock)
    auth.agent(header(token), None)
    assert auth.forget_pod("uid-1") == 1
    assert auth.forget_pod("uid-1") == 0
    reviewer.pods.clear()  # the apiserver now refuses the token of the deleted pod
    clock.now = 11  # past the 10 s cache every review has
    with pytest.raises(AuthError) as refused:
        auth.agent(header(token), None)
    assert refused.value.status == 401
    assert reviewer.reviews == 2


def test_a_cached_identity_still_refuses_another_pods_name() -> None:
    token = jwt({"exp": int(NOW) + 3600})
    auth = authenticator(Reviewer({token: ("web-1", "uid-1")}), Clock())
    auth.agent(header(token), None)
    with pytest.raises(AuthError) as refused:
        auth.agent(header(token), "web-2")
    assert refused.value.status == 403
    assert "bound to pod shop/web-1" in refused.value.message


def test_a_refused_token_is_never_kept_for_long() -> None:
    token = jwt({"exp": int(NOW) + 3600})
    reviewer, clock = Reviewer({}), Clock()
    auth = authenticator(reviewer, clock)
    for _ in range(2):
        with pytest.raises(AuthError):
            auth.agent(header(token), None)
    assert len(auth.agents) == 0
    clock.now = 11  # the 10 s cache of the refusal is over
    with pytest.raises(AuthError):
        auth.agent(header(token), None)
    assert reviewer.reviews == 2


def test_a_full_cache_drops_its_oldest_entry_not_every_entry() -> None:
    cache = AgentCache(max_entries=3, clock=Clock())
    for n in range(4):
        cache.put(f"k{n}", AgentIdentity("shop", "web", f"p{n}", f"u{n}"), 100)
    assert len(cache) == 3
    assert cache.get("k0") is None
    assert all(cache.get(f"k{n}") is not None for n in (1, 2, 3))
    assert cache.forget_pod("u0") == 0


def test_an_unbound_identity_is_not_kept() -> None:
    cache = AgentCache(clock=Clock())
    cache.put("k", AgentIdentity("shop", "web", "p", None), 100)
    assert len(cache) == 0


def pod(name: str, uid: str, version: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "shop", "uid": uid,
                         "resourceVersion": version}}


def listing(*pods: dict[str, Any]) -> Any:
    class Answer:
        data = json.dumps({"metadata": {"resourceVersion": "9"}, "items": list(pods)})
    return lambda **_: Answer()


def test_the_pod_watch_tells_of_deleted_and_replaced_pods() -> None:
    mirror = Mirror("pods", listing(pod("a", "uid-a", "1"), pod("b", "uid-b", "1"),
                                    pod("c", "uid-c", "1")))
    gone: list[str] = []
    mirror.on_deleted.append(lambda obj: gone.append(obj["metadata"]["uid"]))
    mirror._list()
    mirror._apply({"type": "DELETED", "object": pod("a", "uid-a", "2")})
    # The same name, another pod: the watch missed its DELETED (e.g. across a resume).
    mirror._apply({"type": "ADDED", "object": pod("b", "uid-b2", "3")})
    mirror._apply({"type": "MODIFIED", "object": pod("b", "uid-b2", "4")})
    assert gone == ["uid-a", "uid-b"]
    # A relist after a 410: c is gone.
    mirror.lister = listing(pod("b", "uid-b2", "5"))
    mirror._list()
    assert gone == ["uid-a", "uid-b", "uid-c"]


def test_a_failing_listener_never_stops_the_watch() -> None:
    mirror = Mirror("pods", listing(pod("a", "uid-a", "1")))
    mirror._list()
    seen: list[str] = []

    def broken(obj: dict[str, Any]) -> None:
        raise RuntimeError("boom")

    mirror.on_deleted.extend([broken, lambda obj: seen.append(obj["metadata"]["uid"])])
    assert mirror._apply({"type": "DELETED", "object": pod("a", "uid-a", "2")})
    assert seen == ["uid-a"] and mirror.get("shop", "a") is None


def test_hostile_token_payloads_have_no_expiry() -> None:
    assert token_expiry("a.b") is None
    assert token_expiry("a." + "x" * 9000 + ".c") is None
    assert token_expiry("a.!!!.c") is None
    assert token_expiry(jwt(b"[" * 5000)) is None
    assert token_expiry(jwt(b"\xff\xfe")) is None


def test_a_namespaces_pods_are_read_without_scanning_the_cluster() -> None:
    mirror = Mirror("pods", listing(pod("a", "uid-a", "1"), pod("b", "uid-b", "1")))
    mirror._list()
    other = {"metadata": {"name": "a", "namespace": "web", "uid": "uid-w"}}
    mirror._apply({"type": "ADDED", "object": other})
    assert sorted(p["metadata"]["name"] for p in mirror.in_namespace("shop")) == ["a", "b"]
    assert [p["metadata"]["uid"] for p in mirror.in_namespace("web")] == ["uid-w"]
    mirror._apply({"type": "DELETED", "object": other})
    mirror._apply({"type": "MODIFIED", "object": pod("b", "uid-b", "2")})
    assert mirror.in_namespace("web") == [] and "web" not in mirror.by_namespace
    assert [p["metadata"]["resourceVersion"] for p in mirror.in_namespace("shop")
            if p["metadata"]["name"] == "b"] == ["2"]
    assert mirror.in_namespace("nowhere") == []
