"""Failed scheduled recordings reach the pod's owner (issue 23, item 7): the failure report is
hostile input (type-checked, cleaned, capped), the Event on the pod is rate-limited to one per
schedule and reason per hour, a schedule failing 3 times on one pod with one reason is
suspended there until the pod, its profile or the schedule changes, and the failed run shows on
the results page and /api/runs for readers of the namespace only, as text."""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from flask.testing import FlaskClient

from tests.unit.schedules.test_plan import SETTINGS, Rules, namespace, pod
from webhook.config import Settings
from webhook.kube.access import AccessCheck
from webhook.kube.api import ApiError
from webhook.profiles import ProfileSet
from webhook.results import failures, metrics
from webhook.results.auth import AgentIdentity, Authenticator, AuthError, User
from webhook.results.failures import FailureReport, Notifier, ReportError
from webhook.results.mirror import Mirror
from webhook.results.planner import SUSPEND_AFTER, Planner, fingerprint
from webhook.results.service import Retention, Service, create_service_app
from webhook.results.store import Store
from webhook.schedules import plan as plans
from webhook.schedules.plan import Book
from webhook.wire import constants

T0 = datetime(2026, 12, 3, 7, 0, 20, tzinfo=UTC)
EVERY_MINUTE = json.dumps({"cron": "* * * * *", "duration": "5s"})
HOSTILE = "perf failed\n[results] forged line\x1b[31m red \u202egnp.exe <script>alert(1)</script>"


def runs(outcome: str, reason: str = "", technique: str = "perf") -> float:
    return metrics.REGISTRY.get_sample_value(
        "sidecar_debug_results_runs_total",
        {"technique": technique, "outcome": outcome, "reason": reason}) or 0.0


def events(reason: str, outcome: str) -> float:
    return metrics.REGISTRY.get_sample_value(
        "sidecar_debug_results_events_total", {"reason": reason, "outcome": outcome}) or 0.0


# --- the report -----------------------------------------------------------------------------

def test_a_well_formed_report_is_taken_as_it_is() -> None:
    report = failures.parse_report({"ticket": "t", "reason": "not-possible",
                                    "message": "flamegraph exited 4: perf may not open events"})
    assert report == FailureReport("not-possible", "flamegraph exited 4: perf may not open events")


@pytest.mark.parametrize(("body", "field"), [
    ([], "JSON object"),
    ({"ticket": 1, "reason": "x", "message": "m"}, "ticket"),
    ({"ticket": "t", "reason": "Not Possible", "message": "m"}, "reason"),
    ({"ticket": "t", "reason": "a" * 41, "message": "m"}, "reason"),
    ({"ticket": "t", "reason": ["not-possible"], "message": "m"}, "reason"),
    ({"ticket": "t", "reason": "x\n", "message": "m"}, "reason"),
    ({"ticket": "t", "reason": "x", "message": {"text": "m"}}, "message"),
    ({"ticket": "t", "reason": "x"}, "message"),
    ({"ticket": "t", "reason": "x", "message": "m", "pod": "other"}, "unknown field 'pod'"),
])
def test_a_malformed_report_is_refused_saying_which_field(body: Any, field: str) -> None:
    with pytest.raises(ReportError) as refused:
        failures.parse_report(body)
    assert refused.value.status == 400 and field in refused.value.message


def test_the_message_is_one_line_of_plain_text_capped() -> None:
    report = failures.parse_report({"ticket": "t", "reason": "tool-failed", "message": HOSTILE})
    assert report.message == ("perf failed [results] forged line [31m red gnp.exe "
                              "<script>alert(1)</script>")
    assert report.message.isprintable()
    long = failures.parse_report({"ticket": "t", "reason": "x", "message": "é" * 100_000})
    assert long.message == "é" * failures.MAX_MESSAGE
    blank = failures.parse_report({"ticket": "t", "reason": "x", "message": "\x00\n\u2028"})
    assert blank.message == "no message"


def test_an_old_toolsets_failure_is_cleaned_the_same() -> None:
    assert failures.legacy_report({"error": HOSTILE, "reason": "Bad Reason"}) == FailureReport(
        "failed", failures.clean_text(HOSTILE))
    assert failures.legacy_report({"error": 7}) == FailureReport("failed", "no message")


# --- Events, rate-limited -------------------------------------------------------------------

class FakeApi:
    def __init__(self) -> None:
        self.posted: list[tuple[str, dict[str, Any]]] = []
        self.fail: ApiError | None = None

    def call(self, method: str, path: str, body: Any = None, *,
             timeout: float | None = None) -> dict[str, Any]:
        if self.fail is not None:
            raise self.fail
        assert method == "POST" and isinstance(body, dict)
        if any(b["metadata"]["name"] == body["metadata"]["name"] for _, b in self.posted):
            raise ApiError(409, "already exists")
        self.posted.append((path, body))
        return body

    def server_minor(self) -> int:
        return 20


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


WEB = {"namespace": "shop", "name": "web", "uid": "uid-web"}


def test_one_event_per_schedule_and_reason_per_hour_per_pod() -> None:
    api, clock = FakeApi(), Clock()
    notifier = Notifier(api, identity="results-0", clock=clock)
    limited = events(failures.REASON_FAILED, "rate-limited")
    post = notifier.post
    assert post(WEB, "pod/shop/web#0", "not-possible", failures.REASON_FAILED, "a\nb") == "posted"
    path, event = api.posted[0]
    assert path == "/api/v1/namespaces/shop/events"
    assert event["involvedObject"] == {"apiVersion": "v1", "kind": "Pod", "name": "web",
                                       "namespace": "shop", "uid": "uid-web"}
    assert (event["reason"], event["type"], event["message"]) == (
        failures.REASON_FAILED, "Warning", "a b")
    assert event["source"] == {"component": "sidecar-debug-results"}
    for minutes in (1, 30, 59):
        clock.now = T0 + timedelta(minutes=minutes)
        assert post(WEB, "pod/shop/web#0", "not-possible", failures.REASON_FAILED,
                    "m") == "rate-limited"
    assert events(failures.REASON_FAILED, "rate-limited") == limited + 3
    # Another reason, another schedule, another pod, the other Event: each has its own hour.
    assert post(WEB, "pod/shop/web#0", "no-target", failures.REASON_FAILED, "m") == "posted"
    assert post(WEB, "namespace/shop#0", "not-possible", failures.REASON_FAILED, "m") == "posted"
    assert post({**WEB, "uid": "uid-web-2"}, "pod/shop/web#0", "not-possible",
                failures.REASON_FAILED, "m") == "posted"
    assert post(WEB, "pod/shop/web#0", "not-possible", failures.REASON_SUSPENDED,
                "m") == "posted"
    assert len(api.posted) == 5
    clock.now = T0 + timedelta(minutes=60)
    assert post(WEB, "pod/shop/web#0", "not-possible", failures.REASON_FAILED, "m") == "posted"
    assert len(api.posted) == 6


def test_a_restart_within_the_hour_meets_its_own_event() -> None:
    api, clock = FakeApi(), Clock()
    assert Notifier(api, identity="a", clock=clock).post(
        WEB, "pod/shop/web#0", "x", failures.REASON_FAILED, "m") == "posted"
    clock.now = T0 + timedelta(minutes=5)  # a new process: nothing in memory
    assert Notifier(api, identity="b", clock=clock).post(
        WEB, "pod/shop/web#0", "x", failures.REASON_FAILED, "m") == "exists"
    assert len(api.posted) == 1


def test_an_event_the_api_refused_is_tried_again_at_the_next_failure() -> None:
    api, clock = FakeApi(), Clock()
    notifier = Notifier(api, identity="a", clock=clock)
    api.fail = ApiError(403, "events is forbidden")
    assert notifier.post(WEB, "s", "x", failures.REASON_FAILED, "m") == "failed"
    api.fail = None
    clock.now += timedelta(minutes=1)
    assert notifier.post(WEB, "s", "x", failures.REASON_FAILED, "m") == "posted"


def test_messages_say_what_failed_and_what_lifts_a_suspension() -> None:
    report = FailureReport("not-possible", "flamegraph exited 4: perf may not open events")
    first = failures.failed_message("perf", "pod/shop/web#0", T0, report, 1)
    assert first == ("scheduled perf recording of schedule pod/shop/web#0 (due 2026-12-03 07:00 "
                     "UTC) failed (not-possible): flamegraph exited 4: perf may not open events "
                     "[2 more with this reason and the service stops asking this pod; failed "
                     "runs are on the results page]")
    assert "has stopped asking" in failures.failed_message("perf", "s", T0, report, 3)
    suspended = failures.suspended_message("perf", "pod/shop/web#0", report)
    assert "suspended after 3 failures (not-possible" in suspended
    assert "recreate the pod" in suspended and "schedule annotation" in suspended


# --- suspension ----------------------------------------------------------------------------

def planner(tmp_path: Path, settings: Settings = SETTINGS) -> Planner:
    return Planner(settings, Rules(), tmp_path)


def fail_until_suspended(subject: Planner, web: dict[str, Any], reason: str = "not-possible"
                         ) -> datetime:
    """Three minutes, three failures; returns the minute after."""
    for minute in range(SUSPEND_AFTER):
        [ticket] = subject.plan(web, namespace(), [web], T0 + timedelta(minutes=minute))
        subject.finish(ticket.id, "shop", "web", "uid-web")
        count, suspended = subject.failed(ticket, reason)
        assert (count, suspended) == (minute + 1, minute + 1 == SUSPEND_AFTER)
    return T0 + timedelta(minutes=SUSPEND_AFTER)


def test_three_failures_with_one_reason_suspend_the_schedule_on_that_pod(
        tmp_path: Path) -> None:
    web = pod("web", annotation=EVERY_MINUTE)
    other = pod("other", annotation=EVERY_MINUTE)
    subject = planner(tmp_path)
    withheld = runs("suspended", "not-possible")
    after = fail_until_suspended(subject, web)
    assert subject.suspended("pod/shop/web#0", "uid-web") == "not-possible"
    assert subject.plan(web, namespace(), [web], after) == []
    assert subject.plan(web, namespace(), [web], after + timedelta(seconds=20)) == []
    assert subject.plan(web, namespace(), [web], after + timedelta(minutes=1)) == []
    # Metrics keep counting: one withheld run per cron minute, not per poll.
    assert runs("suspended", "not-possible") == withheld + 2
    # Another pod of the namespace is not held up.
    assert len(subject.plan(other, namespace(), [other], after)) == 1
    # A restart of the service does not give the pod three more attempts.
    assert planner(tmp_path).plan(web, namespace(), [web], after + timedelta(minutes=2)) == []


def test_mixed_reasons_and_a_stored_run_in_between_do_not_suspend(tmp_path: Path) -> None:
    web = pod("web", annotation=EVERY_MINUTE)
    subject = planner(tmp_path)
    outcomes = ["not-possible", "not-possible", "no-target", "stored", "not-possible",
                "not-possible", "no-target"]
    for minute, outcome in enumerate(outcomes):
        [ticket] = subject.plan(web, namespace(), [web], T0 + timedelta(minutes=minute))
        subject.finish(ticket.id, "shop", "web", "uid-web")
        if outcome == "stored":
            subject.succeeded(ticket)
        else:
            assert subject.failed(ticket, outcome)[1] is False
    assert len(subject.plan(web, namespace(), [web], T0 + timedelta(minutes=7))) == 1


def test_a_recreated_pod_is_asked_again(tmp_path: Path) -> None:
    web = pod("web", annotation=EVERY_MINUTE)
    subject = planner(tmp_path)
    after = fail_until_suspended(subject, web)
    recreated = pod("web", annotation=EVERY_MINUTE)
    recreated["metadata"]["uid"] = "uid-web-2"
    [ticket] = subject.plan(recreated, namespace(), [recreated], after)
    assert ticket.uid == "uid-web-2"


def test_a_changed_schedule_is_asked_again(tmp_path: Path) -> None:
    web = pod("web", annotation=EVERY_MINUTE)
    subject = planner(tmp_path)
    after = fail_until_suspended(subject, web)
    assert subject.plan(web, namespace(), [web], after) == []
    web["metadata"]["annotations"][constants.ANNOTATION_SCHEDULE] = json.dumps(
        {"cron": "* * * * *", "duration": "3s"})
    [ticket] = subject.plan(web, namespace(), [web], after + timedelta(minutes=1))
    assert ticket.duration == 3
    assert subject.suspended("pod/shop/web#0", "uid-web") == ""


def test_a_changed_profile_is_asked_again(tmp_path: Path) -> None:
    """A pod's profile is fixed at creation (the webhook writes it into the toolset's env). The
    operator gives the profile what it lacked (IPC_LOCK for perf's ring buffer, say): the
    suspended pod no longer verifies against it (not planned; the controller's
    ScheduleNoResultsAgent says to recreate it), and the pod recreated with it is asked."""
    web = pod("web", annotation=EVERY_MINUTE, profile="perf")
    after = fail_until_suspended(planner(tmp_path), web)
    perf = SETTINGS.profiles["perf"]
    context = dict(perf.security_context)
    context["capabilities"] = {"add": ["PERFMON", "SYS_PTRACE", "SYSLOG", "IPC_LOCK"]}
    changed = dataclasses.replace(SETTINGS, profile_set=ProfileSet(
        {**SETTINGS.profiles, "perf": dataclasses.replace(perf, security_context=context)},
        SETTINGS.profile_set.runtimes))
    subject = planner(tmp_path, changed)
    assert subject.plan(web, namespace(), [web], after) == []
    recreated = pod("web", annotation=EVERY_MINUTE, profile="perf", settings=changed)
    recreated["metadata"]["uid"] = "uid-web-2"
    assert plans.toolset_of(recreated, changed) is not None
    assert len(subject.plan(recreated, namespace(), [recreated],
                            after + timedelta(minutes=1))) == 1


def test_the_suspension_is_bound_to_the_schedule_and_the_profile() -> None:
    [schedule] = Book().read("shop", "web", EVERY_MINUTE).schedules
    [shorter] = Book().read("shop", "web", json.dumps({"cron": "* * * * *",
                                                       "duration": "3s"})).schedules
    perf = plans.Toolset("debug-toolset", "perf", frozenset({"perf"}), True)
    full = plans.Toolset("debug-toolset", "full", frozenset({"perf"}), True)
    prints = {fingerprint(schedule, perf, SETTINGS), fingerprint(shorter, perf, SETTINGS),
              fingerprint(schedule, full, SETTINGS)}
    assert len(prints) == 3
    assert fingerprint(schedule, perf, SETTINGS) == fingerprint(schedule, perf, SETTINGS)


def test_a_tampered_state_file_is_read_as_data(tmp_path: Path) -> None:
    state = tmp_path / ".schedules" / "state.json"
    state.parent.mkdir()
    state.write_text(json.dumps({"failures": {
        "pod/shop/web#0|uid-web": {"fingerprint": 7, "counts": {"x": "many"}},
        "pod/shop/other#0|uid-other": {"fingerprint": "f", "counts": {"x": True, "y": 2},
                                       "suspended": ["x"]},
        "junk": "junk"}}))
    subject = planner(tmp_path)
    assert set(subject.streaks) == {("pod/shop/other#0", "uid-other")}
    assert subject.streaks[("pod/shop/other#0", "uid-other")].counts == {"y": 2}
    web = pod("web", annotation=EVERY_MINUTE)
    assert len(subject.plan(web, namespace(), [web], T0)) == 1


# --- the service: the endpoint, the failed run on the page ----------------------------------

class NoReviewer:
    """The Reviewer behind Auth: never asked (Auth answers every question itself)."""

    def token_review(self, token: str, audiences: tuple[str, ...], timeout: float
                     ) -> dict[str, Any]:
        raise AssertionError("Auth reviews no token")

    def access_allowed(self, check: AccessCheck, timeout: float) -> bool:
        raise AssertionError("Auth asks no access review")


class Auth(Authenticator):
    """Agents: the token is the pod's name. Readers: the token is the user; `readers` says
    which namespaces each may read."""

    readers = {"alice": {"shop"}, "bob": set()}

    def __init__(self) -> None:
        super().__init__(NoReviewer(), "sidecar-debug.io/results/test")

    def agent(self, header: str | None, claimed_pod: str | None) -> AgentIdentity:
        name = (header or "").removeprefix("Bearer ")
        return AgentIdentity("shop", "default", name, f"uid-{name}")

    def reader(self, header: str | None) -> User:
        user = (header or "").removeprefix("Bearer ")
        if user not in self.readers:
            raise AuthError(401, "no token")
        return User(user, f"uid-{user}", ())

    def can_read(self, user: User, namespace: str) -> bool:
        return namespace in self.readers[user.name]


class Pods(Mirror):
    """The service's watch of pods (webhook.results.mirror.Mirror), fixed: never started."""

    def __init__(self, *items: dict[str, Any]) -> None:
        super().__init__("pods", lambda **_: None)
        self.fixed = {item["metadata"]["name"]: item for item in items}
        self.ready.set()

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.fixed.get(name) if namespace == "shop" else None

    def in_namespace(self, namespace: str) -> list[dict[str, Any]]:
        return list(self.fixed.values()) if namespace == "shop" else []


class Namespaces(Pods):
    def get(self, scope: str, name: str) -> dict[str, Any] | None:
        return namespace() if name == "shop" else None


@dataclasses.dataclass
class Running:
    client: FlaskClient
    service: Service
    api: FakeApi
    clock: Clock


@pytest.fixture
def running(tmp_path: Path) -> Iterator[Running]:
    web = pod("web", annotation=EVERY_MINUTE)
    api, clock = FakeApi(), Clock()
    service = Service(tmp_path, Auth(), Planner(SETTINGS, Rules(), tmp_path),
                      Pods(web), Namespaces(), Retention(None, None),
                      clock=clock, notifier=Notifier(api, identity="r", clock=clock))
    yield Running(create_service_app(service).test_client(), service, api, clock)


def ticket_of(running: Running) -> str:
    answer = running.client.get("/agent/v1/plan", headers={"Authorization": "Bearer web"})
    assert answer.status_code == 200, answer.get_data(as_text=True)
    [item] = answer.get_json()["runs"]
    return str(item["ticket"])


def report(running: Running, body: Any, *, raw: bytes | None = None) -> Any:
    return running.client.post("/agent/v1/failures", headers={"Authorization": "Bearer web"},
                               data=raw if raw is not None else json.dumps(body),
                               content_type="application/json")


def test_a_malformed_report_is_refused_and_leaves_the_ticket(running: Running) -> None:
    ticket = ticket_of(running)
    answer = report(running, {"ticket": ticket, "reason": 4, "message": "m"})
    assert answer.status_code == 400 and "reason" in answer.get_json()["error"]
    answer = report(running, None, raw=json.dumps(
        {"ticket": ticket, "reason": "x", "message": "m" * 20_000}).encode())
    assert answer.status_code == 413 and "at most" in answer.get_json()["error"]
    assert report(running, None, raw=b"{nope").status_code == 400
    assert report(running, {"ticket": ticket, "reason": "no-target",
                            "message": "m"}).status_code == 200
    assert report(running, {"ticket": ticket, "reason": "no-target",
                            "message": "m"}).status_code == 409  # spent
    assert report(running, {"ticket": "forged", "reason": "x", "message": "m"}).status_code == 409


def test_a_failure_is_a_failed_run_and_an_event(running: Running) -> None:
    failed = runs("failed", "tool-failed")
    ticket = ticket_of(running)
    answer = report(running, {"ticket": ticket, "reason": "tool-failed", "message": HOSTILE})
    assert answer.status_code == 200
    body = answer.get_json()
    assert (body["failures"], body["suspended"]) == (1, False)
    assert runs("failed", "tool-failed") == failed + 1
    [(path, event)] = running.api.posted
    assert event["involvedObject"]["uid"] == "uid-web" and event["reason"] == "RecordingFailed"
    assert "\n" not in event["message"] and "\x1b" not in event["message"]
    # On /api/runs for a reader of the namespace, not for another.
    listed = running.client.get("/api/runs", headers={"Authorization": "Bearer alice"})
    [run] = listed.get_json()
    assert (run["id"], run["outcome"], run["reason"], run["technique"]) == (
        body["run"], "failed", "tool-failed", "perf")
    assert run["message"] == failures.clean_text(HOSTILE)
    assert running.client.get("/api/runs", headers={"Authorization": "Bearer bob"}
                              ).get_json() == []
    assert running.client.get(f"/runs/{body['run']}/",
                              headers={"Authorization": "Bearer bob"}).status_code == 403
    # On the page, as text.
    for path in ("/", f"/runs/{body['run']}/"):
        html = running.client.get(path, headers={"Authorization": "Bearer alice"}
                                  ).get_data(as_text=True)
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html and "<script>" not in html
        assert "tool-failed" in html
    index = running.client.get("/", headers={"Authorization": "Bearer alice"}
                               ).get_data(as_text=True)
    assert re.search(r'<tr class="run failed" data-run="[^"]+">', index)
    assert "2026-12-03 07:00:20" in index
    download = running.client.get(f"/runs/{body['run']}/stacks.folded",
                                  headers={"Authorization": "Bearer alice"})
    assert download.status_code == 404 and "recorded no stacks" in download.get_data(
        as_text=True)


def test_the_third_failure_suspends_and_says_so(running: Running) -> None:
    for minute in range(SUSPEND_AFTER):
        running.clock.now = T0 + timedelta(minutes=minute)
        body = report(running, {"ticket": ticket_of(running), "reason": "not-possible",
                                "message": "perf may not open events"}).get_json()
    assert (body["failures"], body["suspended"]) == (3, True)
    reasons = [event["reason"] for _, event in running.api.posted]
    assert reasons == ["RecordingFailed", "RecordingSuspended"]  # one failure Event per hour
    running.clock.now = T0 + timedelta(minutes=SUSPEND_AFTER)
    answer = running.client.get("/agent/v1/plan", headers={"Authorization": "Bearer web"})
    assert answer.get_json()["runs"] == []
    stored = Store(running.service.store.root).runs("shop", "web")
    assert [run.failed for run in stored] == [True] * 3


def test_an_old_toolsets_failure_push_takes_the_same_path(running: Running) -> None:
    ticket = ticket_of(running)
    answer = running.client.post(
        "/agent/v1/runs", headers={"Authorization": "Bearer web"},
        data=json.dumps({"ticket": ticket, "error": "x\ny", "reason": "no-target"}),
        content_type="application/json")
    assert answer.status_code == 200 and answer.get_json()["reason"] == "no-target"
    [run] = Store(running.service.store.root).runs()
    assert (run.failed, run.message) == (True, "x y")


def test_a_stored_run_clears_the_failures(running: Running) -> None:
    report(running, {"ticket": ticket_of(running), "reason": "x", "message": "m"})
    running.clock.now = T0 + timedelta(minutes=1)
    answer = running.client.post(
        "/agent/v1/runs", headers={"Authorization": "Bearer web"},
        data=json.dumps({"ticket": ticket_of(running), "stacks": "main;fib 5\n"}),
        content_type="application/json")
    assert answer.status_code == 201
    assert running.service.planner.streaks == {}
