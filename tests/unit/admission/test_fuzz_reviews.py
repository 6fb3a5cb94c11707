"""Fuzzing the webhook's review route (issue 12 item 9): >= 10,000 hostile AdmissionReviews.

Each example starts from a real review (the recorded fixtures in tests/fixtures/admission, an
injected-pod review, 1.22+ and 1.20 ephemeral-container reviews) and changes one to four
places: a value replaced by any JSON value (wrong types, nulls, nesting), a key removed, a key
added, or one of the annotation/label values a pod creator writes set to a tricky string. The
review goes through the Flask app (the HTTP route, Mutator.review, the policy gate with a fake
API that grants some subjects and fails some namespace look-ups).

For every example: an AdmissionReview answer (HTTP 200, response.uid echoing a string uid; a
refusal has a 4xx code and a message), a patch that applies to the object, and not one logged
traceback. Derandomized: the same examples on every run (about 30 s of CPU time).
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.unit.admission.conftest import Tracebacks
from tests.unit.policy.test_policy import FakeCluster, make_gate, policy_text
from webhook.admission.guard import PodGuard
from webhook.admission.mutate import Mutator
from webhook.admission.review import decode_patch
from webhook.config import Settings, load_settings
from webhook.inject.patch import apply_patch
from webhook.kube.access import ClusterAPIError
from webhook.server.app import create_app
from webhook.server.routes import EXTENSION
from webhook.wire import constants

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "admission"
# At least 10,000 in CI; SIDECAR_DEBUG_FUZZ_EXAMPLES raises it for a longer local hunt.
EXAMPLES = max(10_000, int(os.environ.get("SIDECAR_DEBUG_FUZZ_EXAMPLES", "0")))
TOOLSET = "localhost/sidecar-debug/toolset:0.1.0"
ALICE = {"username": "alice", "uid": "a-1", "groups": ["devs", "system:authenticated"]}

POLICY = policy_text(
    "allowedProfiles: ['*']\nmode: downgrade\nallowedImages: ['localhost/*']",
    """\
- name: prod
  match:
    namespaceSelector:
      matchLabels: {environment: production}
  allowedProfiles: [lttng]
  mode: deny
  maxSessionDuration: 1h
- name: strict-users
  match:
    namespaces: ["users-*"]
  grantSubject: both
  nonGrantingIdentities: {users: ["ci-*"], groups: ["robots"]}
- name: skip-batch
  match:
    namespaces: ["batch*"]
  allowedProfiles: []
  mode: skip
""",
)


class FuzzCluster(FakeCluster):
    """Grants some subjects, labels some namespaces, and cannot read namespaces whose name
    starts with 'unreadable' (the policy's selector rule is then undecidable)."""

    def namespace_labels(self, name: str, timeout: float) -> Any:
        if name.startswith("unreadable"):
            raise ClusterAPIError(f"GET namespace {name}: connection refused")
        return {"environment": "production"} if name.startswith("prod") else {}


class FuzzPods:
    def read_pod(self, namespace: str, name: str, timeout: float) -> dict[str, Any]:
        if name.startswith("unreadable"):
            raise ClusterAPIError(f"GET pods/{name}: HTTP 403: forbidden")
        return _running_pod()


def _running_pod() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web", "namespace": "demo", "labels": {"debug": "enabled"}},
        "spec": {
            "serviceAccountName": "app",
            "containers": [
                {
                    "name": "app",
                    "image": "app:1",
                    "volumeMounts": [{"name": "scratch", "mountPath": "/tmp"}],
                }
            ],
            "volumes": [
                {"name": "scratch", "emptyDir": {}},
                {"name": "modules", "hostPath": {"path": "/lib/modules", "type": "Directory"}},
            ],
        },
    }


def _pod_review(obj: dict[str, Any], **request: Any) -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "fuzz-uid",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": "demo",
            "operation": "CREATE",
            "userInfo": copy.deepcopy(ALICE),
            "object": obj,
            "oldObject": None,
            "dryRun": False,
            **request,
        },
    }


def _templates() -> list[dict[str, Any]]:
    recorded = [json.loads(p.read_text()) for p in sorted(FIXTURES.glob("*.json"))]
    injected = _running_pod()
    injected["metadata"]["annotations"] = {
        constants.ANNOTATION_PROFILE: "full",
        constants.ANNOTATION_RUNTIME: "python",
        constants.ANNOTATION_TOOLSET_IMAGE: TOOLSET,
        constants.ANNOTATION_MODE: "injected",
    }
    injected["spec"]["initContainers"] = [{"name": "init", "image": "busybox"}]
    injected["spec"]["containers"][0]["env"] = [{"name": "A", "value": "1"}]
    standby = _running_pod()
    standby["metadata"]["annotations"] = {constants.ANNOTATION_MODE: "standby"}
    toolset = {
        "name": "debug-toolset-abc",
        "image": TOOLSET,
        "targetContainerName": "app",
        "env": [
            {"name": constants.ENV_ATTACHED, "value": "true"},
            {"name": constants.ENV_PROFILE, "value": "perf"},
        ],
        "volumeMounts": [{"name": "scratch", "mountPath": "/tmp"}],
    }
    sysadmin = {
        "name": "sysadmin",
        "image": "busybox",
        "securityContext": {"privileged": True},
        "volumeMounts": [{"name": "modules", "mountPath": "/lib/modules"}],
    }
    return [
        *recorded,
        _pod_review(injected),
        _pod_review(standby, namespace="users-a"),
        _pod_review(copy.deepcopy(injected), namespace="prod-1"),
        _pod_review(copy.deepcopy(injected), namespace="unreadable-1"),
        _pod_review(_running_pod(), namespace="batch-1"),
        _ephemeral_review(toolset),
        _ephemeral_review(sysadmin),
    ]


def _ephemeral_review(container: dict[str, Any]) -> dict[str, Any]:
    before, after = _running_pod(), _running_pod()
    before["spec"]["ephemeralContainers"] = []
    after["spec"]["ephemeralContainers"] = [container]
    return _pod_review(
        after,
        operation="UPDATE",
        subResource="ephemeralcontainers",
        name="web",
        oldObject=before,
    )


TEMPLATES = _templates()

# Strings a pod creator writes where the webhook reads them.
TRICKY = [
    "",
    " ",
    "full",
    "perf",
    "lttng",
    "bcc",
    "nope",
    "standby",
    "injected",
    "true",
    "false",
    "enabled",
    "disabled",
    "python",
    "dotnet",
    "{}",
    '{"container": []}',
    '{"container": "app"}',
    '{"container": 5}',
    '{"mode": "standby"}',
    "[]",
    "null",
    "[" * 3000,
    "a\nb",
    'x"}{',
    "\x00",
    "é" * 300,
    "docker.io/evil/toolset:latest",
    "localhost/other:1",
    "system:serviceaccount:kube-system:replicaset-controller",
]
KEYS = [
    constants.ANNOTATION_PROFILE,
    constants.ANNOTATION_STATUS,
    constants.ANNOTATION_INJECT,
    constants.ANNOTATION_RUNTIME,
    constants.ANNOTATION_MODE,
    constants.ANNOTATION_TOOLSET_IMAGE,
    "debug",
    "uid",
    "name",
    "namespace",
    "env",
    "volumeMounts",
    "securityContext",
    "ephemeralContainers",
    "initContainers",
    "containers",
    "volumes",
    "hostPath",
    "groups",
    "username",
    "kind",
    "spec",
    "metadata",
    "annotations",
    "labels",
    "os",
    "nodeSelector",
    "affinity",
    "restartPolicy",
]

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.sampled_from(TRICKY)
    | st.text(max_size=12)
)
# Any JSON value, two levels deep (deeper nesting finds nothing new and costs time).
json_values = (
    scalars
    | st.lists(scalars, max_size=3)
    | st.dictionaries(
        st.sampled_from(KEYS) | st.text(max_size=6),
        scalars | st.lists(scalars, max_size=2),
        max_size=3,
    )
)


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    if prefix:
        yield prefix
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _paths(value, (*prefix, index))


# Each template as JSON text (a fresh copy per example) and its paths, the object's first.
CORPUS = [
    (
        json.dumps(template),
        sorted(_paths(template), key=lambda p: (p[:2] != ("request", "object"), len(p))),
    )
    for template in TEMPLATES
]


def _parent(document: Any, path: tuple[Any, ...]) -> Any:
    """The container holding `path`'s last step; None when an earlier change removed it."""
    for part in path[:-1]:
        if isinstance(document, dict) and isinstance(part, str) and part in document:
            document = document[part]
        elif isinstance(document, list) and isinstance(part, int) and part < len(document):
            document = document[part]
        else:
            return None
    last = path[-1]
    if isinstance(document, dict) and isinstance(last, str) and last in document:
        return document
    if isinstance(document, list) and isinstance(last, int) and last < len(document):
        return document
    return None


@st.composite
def hostile_reviews(draw: st.DrawFn) -> dict[str, Any]:
    text, paths = draw(st.sampled_from(CORPUS))
    review: dict[str, Any] = json.loads(text)
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        path = draw(st.sampled_from(paths))
        parent = _parent(review, path)
        if parent is None:
            continue
        action = draw(st.sampled_from(["replace", "tricky", "add", "delete"]))
        if action == "delete":
            del parent[path[-1]]
        elif action == "add" and isinstance(parent[path[-1]], dict):
            value = draw(st.sampled_from(TRICKY) | json_values)
            parent[path[-1]][draw(st.sampled_from(KEYS))] = value
        elif action == "tricky":
            parent[path[-1]] = draw(st.sampled_from(TRICKY))
        else:
            parent[path[-1]] = draw(json_values)
    return review


def _check_answer(body: dict[str, Any], status: int, payload: bytes) -> None:
    text = payload.decode(errors="replace")
    assert "Traceback" not in text
    answer = json.loads(payload)
    if status != 200:
        assert 400 <= status < 500 and answer.get("error"), (status, text[:300])
        return
    assert answer["kind"] == "AdmissionReview"
    response = answer["response"]
    assert isinstance(response["allowed"], bool)
    request = body.get("request")
    uid = request.get("uid") if isinstance(request, dict) else None
    if body.get("kind") == "AdmissionReview" and isinstance(uid, str):
        assert response["uid"] == uid
    if not response["allowed"]:
        code = response["status"]["code"]
        assert 400 <= code < 500 and response["status"]["message"], response
    if "patch" in response:
        assert response["allowed"] is True
        patch = decode_patch(answer)
        obj = request["object"] if isinstance(request, dict) else None
        assert isinstance(obj, dict)
        apply_patch(obj, patch)  # raises when the patch does not fit the object


def test_ten_thousand_hostile_reviews_get_answers_and_no_traceback(
    tmp_path: Path, tracebacks: Tracebacks
) -> None:
    webhook_settings: Settings = load_settings(environ={"SIDECAR_DEBUG_TOOLSET_IMAGE": TOOLSET})
    cluster = FuzzCluster()
    cluster.grant_sa("demo", "app", "full")
    cluster.grants.add(("alice", "perf", "demo"))
    cluster.grants.add(("alice", "full", "users-a"))
    gate = make_gate(webhook_settings, cluster, POLICY, tmp_path)
    app = create_app(webhook_settings, gate)
    app.extensions[EXTENSION].mutator.pods = FuzzPods()
    assert isinstance(app.extensions[EXTENSION].mutator, Mutator)
    client = app.test_client()
    decisions: dict[str, int] = {}

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(hostile_reviews())
    def review(body: dict[str, Any]) -> None:
        tracebacks.found.clear()
        reply = client.post("/mutate", data=json.dumps(body), content_type="application/json")
        _check_answer(body, reply.status_code, reply.data)
        assert tracebacks.found == [], tracebacks.found
        audit = (reply.get_json().get("response") or {}).get("auditAnnotations") or {}
        key = audit.get(constants.AUDIT_DECISION, "none")
        decisions[key] = decisions.get(key, 0) + 1

    review()
    # The examples reach every outcome, not only the early refusals.
    assert sum(decisions.values()) >= EXAMPLES
    for outcome in ("injected", "attached", "denied", "skipped", "ignored"):
        assert decisions.get(outcome, 0) >= 50, decisions


NAMESPACE_EXAMPLES = 2_000


def _namespace_review(old_labels: dict[str, str] | None) -> dict[str, Any]:
    def namespace(labels: dict[str, str] | None) -> dict[str, Any]:
        metadata: dict[str, Any] = {"name": "team-a"}
        if labels is not None:
            metadata["labels"] = labels
        return {"apiVersion": "v1", "kind": "Namespace", "metadata": metadata}

    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "fuzz-ns",
            "kind": {"group": "", "version": "v1", "kind": "Namespace"},
            "resource": {"group": "", "version": "v1", "resource": "namespaces"},
            "name": "team-a",
            "operation": "UPDATE",
            "userInfo": copy.deepcopy(ALICE),
            "object": namespace({"debug": "enabled", "team": "a"}),
            "oldObject": namespace(old_labels),
        },
    }


NAMESPACE_CORPUS = [
    (json.dumps(review), sorted(_paths(review), key=len))
    for review in (_namespace_review({"team": "a"}), _namespace_review(None))
]


@st.composite
def hostile_namespace_reviews(draw: st.DrawFn) -> dict[str, Any]:
    text, paths = draw(st.sampled_from(NAMESPACE_CORPUS))
    review: dict[str, Any] = json.loads(text)
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        path = draw(st.sampled_from(paths))
        parent = _parent(review, path)
        if parent is not None:
            parent[path[-1]] = draw(st.sampled_from(TRICKY) | json_values)
    return review


def test_hostile_namespace_reviews_get_answers_and_no_traceback(
    tmp_path: Path, tracebacks: Tracebacks
) -> None:
    """The namespace-label gate's route (/validate-namespace) likewise."""
    from webhook.server.app import namespace_gate

    webhook_settings = load_settings(environ={})
    cluster = FuzzCluster()
    cluster.grants.add(("alice", constants.NAMESPACE_OPT_IN_GRANT, "team-a"))
    gate = make_gate(webhook_settings, cluster, POLICY, tmp_path)
    app = create_app(webhook_settings, gate, namespace_reviewer=namespace_gate(gate))
    client = app.test_client()
    outcomes: dict[str, int] = {}

    @settings(
        max_examples=NAMESPACE_EXAMPLES,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(hostile_namespace_reviews())
    def review(body: dict[str, Any]) -> None:
        tracebacks.found.clear()
        reply = client.post(
            "/validate-namespace", data=json.dumps(body), content_type="application/json"
        )
        assert reply.status_code == 200, reply.data[:300]
        _check_answer(body, reply.status_code, reply.data)
        assert tracebacks.found == [], tracebacks.found
        response = reply.get_json()["response"]
        key = "allowed" if response["allowed"] else str(response["status"]["code"])
        outcomes[key] = outcomes.get(key, 0) + 1

    review()
    assert outcomes.get("allowed", 0) >= 50 and outcomes.get("400", 0) >= 50, outcomes


def test_hostile_namespace_reviews_at_the_name_gate_get_answers_and_no_traceback(
    tracebacks: Tracebacks,
) -> None:
    """The name label's gate (/validate-namespace-name, issue 24) likewise: every hostile
    review is answered (allowed, 400, or 403 when the label names another namespace)."""
    webhook_settings = load_settings(environ={})
    app = create_app(webhook_settings, make_gate(webhook_settings, FuzzCluster()))
    client = app.test_client()
    outcomes: dict[str, int] = {}

    @settings(max_examples=NAMESPACE_EXAMPLES // 2, deadline=None, derandomize=True,
              database=None, suppress_health_check=list(HealthCheck))
    @given(hostile_namespace_reviews())
    def review(body: dict[str, Any]) -> None:
        tracebacks.found.clear()
        metadata: Any = body
        for key in ("request", "object", "metadata"):
            metadata = metadata.get(key) if isinstance(metadata, dict) else None
        if isinstance(metadata, dict) and isinstance(metadata.get("labels"), dict):
            metadata["labels"][constants.LABEL_NAMESPACE_NAME] = "kube-system"
        reply = client.post(
            "/validate-namespace-name", data=json.dumps(body), content_type="application/json"
        )
        assert reply.status_code == 200, reply.data[:300]
        _check_answer(body, reply.status_code, reply.data)
        assert tracebacks.found == [], tracebacks.found
        response = reply.get_json()["response"]
        key = "allowed" if response["allowed"] else str(response["status"]["code"])
        outcomes[key] = outcomes.get(key, 0) + 1

    review()
    assert outcomes.get("400", 0) >= 25 and outcomes.get("403", 0) >= 25, outcomes


GUARD_EXAMPLES = 2_000


def test_hostile_reviews_to_the_guard_get_answers_and_no_traceback(
    tmp_path: Path, tracebacks: Tracebacks
) -> None:
    """The same hostile corpus sent to /validate-pods (issue 17): an answer for every one (a
    refusal with a 4xx code), never an internal error, not one logged traceback."""
    webhook_settings: Settings = load_settings(environ={"SIDECAR_DEBUG_TOOLSET_IMAGE": TOOLSET})
    cluster = FuzzCluster()
    cluster.grant_sa("demo", "app", "full")
    gate = make_gate(webhook_settings, cluster, POLICY, tmp_path)
    guard = PodGuard(webhook_settings, gate, pods=FuzzPods())
    client = create_app(webhook_settings, gate, pod_validator=guard.review).test_client()
    reasons: dict[str, int] = {}

    @settings(max_examples=GUARD_EXAMPLES, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(hostile_reviews())
    def review(body: dict[str, Any]) -> None:
        tracebacks.found.clear()
        reply = client.post("/validate-pods", data=json.dumps(body),
                            content_type="application/json")
        _check_answer(body, reply.status_code, reply.data)
        assert tracebacks.found == [], tracebacks.found
        audit = (reply.get_json().get("response") or {}).get("auditAnnotations") or {}
        reason = audit.get(constants.AUDIT_REASON, "none")
        reasons[reason] = reasons.get(reason, 0) + 1

    review()
    assert "internal-error" not in reasons, reasons
    for reason in ("allowed", "pod-security", "malformed"):
        assert reasons.get(reason, 0) >= 20, reasons
