"""A results service on fakes of the apiserver (tokens, pods, namespaces) for unit tests: each
token `NAMESPACE/POD` is that pod's projected token, `reader` a reader allowed everywhere. The
pods run the injected toolset with a schedule due every minute; `clock` moves the service's
time (a ticket per pod per minute)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from flask.testing import FlaskClient

from tests.unit.schedules.test_plan import SETTINGS, Rules, namespace, pod
from webhook.kube.access import AccessCheck
from webhook.results.auth import Authenticator
from webhook.results.mirror import Mirror, slim
from webhook.results.planner import Planner
from webhook.results.service import Retention, Service, create_service_app
from webhook.wire import constants
from webhook.wire.pod import service_account

AUDIENCE = "sidecar-debug.io/results/sd/r"
T0 = datetime(2026, 12, 3, 7, 0, 20, tzinfo=UTC)


class FakeReviewer:
    def token_review(self, token: str, audiences: tuple[str, ...], timeout: float
                     ) -> dict[str, Any]:
        if token == "reader":  # noqa: S105 - a fake token
            return {"authenticated": True, "user": {"username": "alice", "uid": "u-alice"}}
        space, _, name = token.partition("/")
        if not name:
            return {"authenticated": False}
        return {"authenticated": True, "audiences": list(audiences),
                "user": {"username": f"system:serviceaccount:{space}:default",
                         "uid": f"sa-{space}",
                         "extra": {constants.EXTRA_POD_NAME: [name],
                                   constants.EXTRA_POD_UID: [f"uid-{name}"]}}}

    def access_allowed(self, check: AccessCheck, timeout: float) -> bool:
        return True


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now

    def next_minute(self) -> None:
        self.now += timedelta(minutes=1)


def schedule(technique: str = "perf", duration: str = "5s", frequency: int = 99) -> str:
    return json.dumps({"cron": "* * * * *", "duration": duration, "technique": technique,
                       "frequency": frequency})


def make_service(root: Path, pods: dict[str, list[str]], *, annotation: str | None = None,
                 quota: int | None = None, max_concurrent: int = 2,
                 clock: Clock | None = None) -> Service:
    """The service over `root`, watching pods {namespace: [pod names]}, each annotated with
    `annotation` (default: perf every minute for 5 s at 99 Hz)."""
    pod_mirror, namespace_mirror = Mirror("pods", lambda **_: None), \
        Mirror("namespaces", lambda **_: None)
    for space, names in pods.items():
        namespace_mirror.items[("", space)] = slim(namespace(space))
        for name in names:
            obj = pod(name, namespace=space, annotation=annotation or schedule())
            assert service_account(obj) == "default"
            pod_mirror.items[(space, name)] = slim(obj)
    pod_mirror.ready.set()
    namespace_mirror.ready.set()
    return Service(root, Authenticator(FakeReviewer(), AUDIENCE),
                   Planner(SETTINGS, Rules(), root, max_concurrent=max_concurrent),
                   pod_mirror, namespace_mirror, Retention(None, None), clock=clock or Clock(),
                   quota=quota)


def headers(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def ticket(client: FlaskClient, token: str) -> dict[str, Any]:
    answer = client.get("/agent/v1/plan", headers=headers(token))
    assert answer.status_code == 200, answer.get_data(as_text=True)
    runs = answer.get_json()["runs"]
    assert len(runs) == 1, runs
    return dict(runs[0])


def client_of(service: Service) -> FlaskClient:
    return create_service_app(service).test_client()
