"""Values a pod creator (or a client talking to the webhook directly) can write, of the wrong
type or shape (issue 12 items 8 and 9): one clear warning or a 400 answer naming the field,
never a traceback, through the real review path (Mutator.review) and the HTTP route."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from flask.testing import FlaskClient

from tests.unit.admission.conftest import Tracebacks
from tests.unit.core_helpers import admission_review, default_settings, settings_with
from webhook.admission.mutate import Mutator
from webhook.admission.review import Response, Review, decode_patch
from webhook.inject.patch import apply_patch
from webhook.policy.api import AllowAll
from webhook.server.app import create_app
from webhook.wire import constants

STATUS = constants.ANNOTATION_STATUS
UID = "5b0e1c7e-1d2f-4c1b-9a59-3f8c1f0e2a11"


def _pod(annotations: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "web",
            "labels": {"debug": "enabled"},
            "annotations": annotations or {},
        },
        "spec": {"containers": [{"name": "app", "image": "app:1"}], **spec},
    }


def _review(pod: Any, **request: Any) -> dict[str, Any]:
    body = admission_review(pod if isinstance(pod, dict) else {})
    body["request"]["uid"] = UID
    if not isinstance(pod, dict):
        body["request"]["object"] = pod
    body["request"].update(request)
    return body


@pytest.fixture(scope="module")
def client() -> FlaskClient:
    return create_app(default_settings(), AllowAll(grant="test")).test_client()


def _mutate(body: dict[str, Any]) -> Response:
    review = Mutator(default_settings(), AllowAll(grant="test")).review(copy.deepcopy(body))
    assert "Traceback" not in json.dumps(review)
    return review["response"]


def _http(client: FlaskClient, body: dict[str, Any]) -> Response:
    reply = client.post("/mutate", data=json.dumps(body), content_type="application/json")
    assert reply.status_code == 200, reply.data[:300]
    assert b"Traceback" not in reply.data
    answer = reply.get_json()
    assert answer["kind"] == "AdmissionReview"
    response: Response = answer["response"]
    assert response["uid"] == UID
    return response


# ---------------------------------------------------------------------------------------------
# Item 8: the status annotation (any pod creator can write it)


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("{}", 'it names no "container"'),
        ('{"container": []}', 'its "container" is a list, not a container name'),
        ('{"container": {}}', 'its "container" is an object, not a container name'),
        ('{"container": 7}', 'its "container" is an integer, not a container name'),
        ('{"container": null}', 'its "container" is null, not a container name'),
        ('{"container": ""}', 'its "container" is empty'),
        ("[]", "a JSON list, not an object"),
        ('"sidecar-debug"', "a JSON string, not an object"),
        ("null", "a JSON null, not an object"),
        ("12", "a JSON integer, not an object"),
        ("not json", "not JSON"),
        ("[" * 5000, "not JSON"),
    ],
)
@pytest.mark.parametrize("path", ["mutate", "http"])
def test_a_status_annotation_that_is_not_ours_is_one_warning(
    client: FlaskClient, tracebacks: Tracebacks, path: str, value: str, problem: str
) -> None:
    body = _review(_pod({STATUS: value}))
    response = _mutate(body) if path == "mutate" else _http(client, body)
    assert response["allowed"] is True
    ours = [w for w in response.get("warnings", []) if STATUS in w]
    assert len(ours) == 1, response.get("warnings")
    assert f"is not sidecar-debug's status ({problem})" in ours[0]
    # The pod has no sidecar: it is injected, and the status annotation becomes ours.
    assert response["auditAnnotations"][constants.AUDIT_DECISION] == "injected"
    review: Review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                      "response": response}
    pod = apply_patch(body["request"]["object"], decode_patch(review))
    names = [c["name"] for c in pod["spec"]["containers"] + pod["spec"].get("initContainers", [])]
    assert default_settings().sidecar_name in names
    assert json.loads(pod["metadata"]["annotations"][STATUS])["container"] in names


def test_our_own_status_and_a_standby_status_give_no_warning(tracebacks: Tracebacks) -> None:
    for status in ({"container": "sidecar-debug", "profile": "full"}, {"mode": "standby"}):
        response = _mutate(_review(_pod({STATUS: json.dumps(status)})))
        assert response["allowed"] is True
        assert not [w for w in response.get("warnings", []) if STATUS in w]


# ---------------------------------------------------------------------------------------------
# Item 8: label and annotation values of the wrong type or an unknown word


@pytest.mark.parametrize(
    ("annotations", "labels", "expected"),
    [
        ({constants.ANNOTATION_INJECT: "maybe"}, {}, 'read as "false"'),
        ({constants.ANNOTATION_RUNTIME: "cobol"}, {}, "unknown runtime 'cobol'"),
        ({constants.ANNOTATION_TOOLSET_IMAGE: "a b"}, {}, "is not an image reference"),
        ({constants.ANNOTATION_PROFILE: ""}, {}, "is empty; the default profile"),
        ({}, {"debug": "yes"}, "is neither 'enabled' nor 'disabled'; read as 'enabled'"),
    ],
)
@pytest.mark.parametrize("path", ["mutate", "http"])
def test_unreadable_words_are_one_warning_each(
    client: FlaskClient,
    tracebacks: Tracebacks,
    path: str,
    annotations: dict[str, str],
    labels: dict[str, str],
    expected: str,
) -> None:
    pod = _pod(annotations)
    pod["metadata"]["labels"].update(labels)
    body = _review(pod)
    response = _mutate(body) if path == "mutate" else _http(client, body)
    assert response["allowed"] is True
    warnings = response.get("warnings", [])
    assert len([w for w in warnings if expected in w]) == 1, warnings


@pytest.mark.parametrize(
    ("key", "value", "field"),
    [
        (STATUS, {"container": []}, f'annotations["{STATUS}"] must be a string, got object'),
        (STATUS, {}, f'annotations["{STATUS}"] must be a string, got object'),
        (
            constants.ANNOTATION_PROFILE,
            5,
            f'metadata.annotations["{constants.ANNOTATION_PROFILE}"] must be a string, got integer',
        ),
        (
            constants.ANNOTATION_INJECT,
            False,
            f'metadata.annotations["{constants.ANNOTATION_INJECT}"] must be a string, got boolean',
        ),
        (
            constants.ANNOTATION_MODE,
            ["standby"],
            f'metadata.annotations["{constants.ANNOTATION_MODE}"] must be a string, got list',
        ),
        (
            constants.ANNOTATION_RUNTIME,
            None,
            f'metadata.annotations["{constants.ANNOTATION_RUNTIME}"] must be a string, got null',
        ),
    ],
)
@pytest.mark.parametrize("path", ["mutate", "http"])
def test_non_string_annotations_are_a_400_naming_the_annotation(
    client: FlaskClient, tracebacks: Tracebacks, path: str, key: str, value: Any, field: str
) -> None:
    """The API server only stores strings there, so only a client calling the webhook directly
    (or a manifest given to offline inject) sends these: refused, the annotation named."""
    body = _review(_pod({key: value}))
    response = _mutate(body) if path == "mutate" else _http(client, body)
    assert response["allowed"] is False
    assert response["status"]["code"] == 400
    assert field in response["status"]["message"]
    assert response["auditAnnotations"][constants.AUDIT_REASON] == "malformed-object"


def test_a_non_string_label_is_a_400_naming_it(tracebacks: Tracebacks) -> None:
    pod = _pod()
    pod["metadata"]["labels"]["debug"] = True
    response = _mutate(_review(pod))
    assert (response["allowed"], response["status"]["code"]) == (False, 400)
    assert "metadata.labels.debug must be a string, got boolean" in response["status"]["message"]


# ---------------------------------------------------------------------------------------------
# Item 9: malformed shapes, named in the answer


def _with(path: list[str | int], value: Any) -> dict[str, Any]:
    pod = _pod()
    target: Any = pod
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return pod


MALFORMED_PODS = [
    (_with(["spec", "containers"], "app"), "spec.containers must be a list, got string"),
    (
        _with(["spec", "containers", 0, "env"], {"A": "1"}),
        "spec.containers[0].env must be a list, got object",
    ),
    (_with(["metadata", "annotations"], ["a"]), "metadata.annotations must be an object, got list"),
    (_with(["metadata", "labels"], "debug"), "metadata.labels must be an object, got string"),
    (_with(["metadata"], 5), "metadata must be an object, got integer"),
    (_with(["spec", "containers", 0], "app"), "spec.containers[0] must be an object, got string"),
    (_with(["spec", "containers", 0, "name"], ["app"]), "spec.containers[0].name must be a string"),
    (
        _with(["spec", "containers", 0, "volumeMounts"], [{"name": 1}]),
        "spec.containers[0].volumeMounts[0].name must be a string, got integer",
    ),
    (_with(["spec", "volumes"], {"tmp": {}}), "spec.volumes must be a list, got object"),
    (_with(["spec", "initContainers"], "x"), "spec.initContainers must be a list, got string"),
    (
        _with(["spec", "shareProcessNamespace"], "yes"),
        "spec.shareProcessNamespace must be a boolean, got string",
    ),
    (
        _with(["spec", "serviceAccountName"], {"name": "app"}),
        "spec.serviceAccountName must be a string, got object",
    ),
]


@pytest.mark.parametrize(("pod", "field"), MALFORMED_PODS, ids=[m[1][:40] for m in MALFORMED_PODS])
@pytest.mark.parametrize("path", ["mutate", "http"])
def test_a_malformed_pod_is_a_400_naming_the_field(
    client: FlaskClient, tracebacks: Tracebacks, path: str, pod: dict[str, Any], field: str
) -> None:
    body = _review(pod)
    response = _mutate(body) if path == "mutate" else _http(client, body)
    assert response["allowed"] is False
    assert response["status"]["code"] == 400
    message = response["status"]["message"]
    assert message.startswith("sidecar-debug cannot read the Pod: ")
    assert field in message
    assert "Fix the manifest" in message


MALFORMED_REQUESTS = [
    ({"userInfo": "alice"}, "request.userInfo must be an object, got string"),
    ({"userInfo": {"username": "a", "groups": "devs"}}, "request.userInfo.groups must be a list"),
    ({"userInfo": {"username": 5}}, "request.userInfo.username must be a string, got integer"),
    ({"userInfo": {"extra": {"k": "v"}}}, 'request.userInfo.extra.k must be a list, got string'),
    ({"kind": "Pod"}, "request.kind must be an object, got string"),
    ({"resource": ["pods"]}, "request.resource must be an object, got list"),
    ({"namespace": 3}, "request.namespace must be a string, got integer"),
    ({"operation": ["CREATE"]}, "request.operation must be a string, got list"),
    ({"dryRun": "false"}, "request.dryRun must be a boolean, got string"),
    ({"subResource": {}}, "request.subResource must be a string, got object"),
]


@pytest.mark.parametrize(
    ("fields", "field"), MALFORMED_REQUESTS, ids=[m[1][:40] for m in MALFORMED_REQUESTS]
)
@pytest.mark.parametrize("path", ["mutate", "http"])
def test_a_malformed_request_is_a_400_naming_the_field(
    client: FlaskClient, tracebacks: Tracebacks, path: str, fields: dict[str, Any], field: str
) -> None:
    body = _review(_pod(), **fields)
    response = _mutate(body) if path == "mutate" else _http(client, body)
    assert (response["allowed"], response["status"]["code"]) == (False, 400)
    assert field in response["status"]["message"]
    assert response["status"]["message"].startswith("sidecar-debug cannot read the AdmissionReview")


def test_a_malformed_uid_is_not_echoed_as_something_else(tracebacks: Tracebacks) -> None:
    body = _review(_pod(), uid=12)
    response = _mutate(body)
    assert response["uid"] == ""
    assert "request.uid must be a string, got integer" in response["status"]["message"]


def test_a_huge_malformed_pod_is_named_too(tracebacks: Tracebacks) -> None:
    """Above maxPodContainers the opt-in is read before the pipeline's shape check: a label map
    that is a list must still get the answer naming it, not a traceback."""
    pod = _pod(spec=None)
    pod["spec"]["containers"] = [{"name": f"c{i}", "image": "x"} for i in range(5)]
    pod["spec"]["initContainers"] = "init"
    pod["metadata"]["labels"] = ["debug"]
    review: Any = Mutator(settings_with(max_pod_containers=2), AllowAll()).review(_review(pod))
    response = review["response"]
    assert (response["allowed"], response["status"]["code"]) == (False, 400)
    assert "metadata.labels must be an object, got list" in response["status"]["message"]


@pytest.mark.parametrize(
    ("obj", "field"),
    [
        ({"spec": {"ephemeralContainers": "x"}}, "object.spec.ephemeralContainers must be a list"),
        (
            {"spec": {"ephemeralContainers": [{"name": "d", "env": {"A": "1"}}]}},
            "object.spec.ephemeralContainers[0].env must be a list, got object",
        ),
        (
            {"spec": {"ephemeralContainers": [{"name": "d", "securityContext": "privileged"}]}},
            "object.spec.ephemeralContainers[0].securityContext must be an object, got string",
        ),
        ({"metadata": {"annotations": []}}, "object.metadata.annotations must be an object"),
    ],
)
def test_a_malformed_ephemeral_container_review_is_a_400_naming_the_field(
    tracebacks: Tracebacks, obj: dict[str, Any], field: str
) -> None:
    body = _review(
        obj,
        operation="UPDATE",
        subResource="ephemeralcontainers",
        name="web",
        oldObject={"spec": {}},
    )
    response = _mutate(body)
    assert (response["allowed"], response["status"]["code"]) == (False, 400)
    assert field in response["status"]["message"]


@pytest.mark.parametrize(
    "null_at",
    [
        ("metadata",),
        ("metadata", "annotations"),
        ("spec", "volumes"),
        ("spec", "initContainers"),
        ("spec", "containers", 0, "env"),
        ("spec", "containers", 0, "volumeMounts"),
    ],
)
@pytest.mark.parametrize("native", [False, True])
@pytest.mark.parametrize("mode", ["injected", "standby"])
def test_json_null_counts_as_absent_where_the_sidecar_is_written(
    tracebacks: Tracebacks, null_at: tuple[str | int, ...], native: bool, mode: str
) -> None:
    """A manifest's bare `annotations:` (or `volumes:`, `env:`) is null: found by the fuzz suite,
    each crashed the injection (NoneType has no attribute 'insert')."""
    pod = _pod({constants.ANNOTATION_MODE: mode})
    pod["spec"]["containers"][0]["volumeMounts"] = [{"name": "data", "mountPath": "/data"}]
    pod["spec"]["volumes"] = [{"name": "data", "emptyDir": {}}]
    target: Any = pod
    for key in null_at[:-1]:
        target = target[key]
    target[null_at[-1]] = None
    review: Any = Mutator(settings_with(native_sidecar=native), AllowAll()).review(_review(pod))
    response = review["response"]
    assert response["allowed"] is True
    assert response["auditAnnotations"][constants.AUDIT_DECISION] == "injected", response
    patched = apply_patch(pod, decode_patch(review))
    assert STATUS in patched["metadata"]["annotations"]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (("object", "metadata", "labels"), "request.object.metadata.labels must be an object"),
        (("object", "metadata"), "request.object.metadata must be an object, got list"),
        (("oldObject",), "request.oldObject must be an object, got list"),
        (("userInfo",), "request.userInfo must be an object, got list"),
    ],
)
def test_a_malformed_namespace_review_is_a_400_naming_the_field(
    tracebacks: Tracebacks, change: tuple[str, ...], field: str
) -> None:
    from tests.unit.policy.test_policy import FakeCluster, make_gate
    from webhook.admission.namespace import review_namespace

    namespace = {"metadata": {"name": "team-a", "labels": {"debug": "enabled"}}}
    request: Any = {
        "uid": UID,
        "operation": "UPDATE",
        "object": namespace,
        "oldObject": {"metadata": {"name": "team-a"}},
        "userInfo": {"username": "alice"},
    }
    target = request
    for key in change[:-1]:
        target = target[key]
    target[change[-1]] = ["x"]
    answer = review_namespace(request, make_gate(default_settings(), FakeCluster()))
    response: Any = answer["response"]
    assert (response["uid"], response["allowed"], response["status"]["code"]) == (UID, False, 400)
    assert field in response["status"]["message"]
