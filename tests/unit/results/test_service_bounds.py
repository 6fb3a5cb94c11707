"""The results service is bounded per push and per namespace (issue 24 item 2): a push is
read as its ticket's technique writes, within caps on frame length, stack depth, distinct
stacks, samples (duration x frequency x a margin) and JSON shape, each refused with 413/422
and the reason; a namespace's runs stay within its quota, the oldest removed first; pushes
take a slot of their namespace and of the service (429 when none is free). Each test tries
to get around its bound."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from tests.unit.results.service_harness import (
    Clock,
    client_of,
    headers,
    make_service,
    schedule,
    ticket,
)
from webhook.results import metrics, service
from webhook.results.service import quota_bytes
from webhook.stacks import folded

BPFTRACE = """Attaching 2 probes...
@[
    do_syscall_64+123
    entry_SYSCALL_64_after_hwframe+68
,
    0x7f1234
    fib+31
, node]: 42
"""


def push(client: Any, token: str, body: dict[str, Any]) -> Any:
    return client.post("/agent/v1/runs", data=json.dumps(body), headers=headers(token),
                       content_type="application/json")


def runs_metric(outcome: str, reason: str, technique: str = "perf") -> float:
    return metrics.REGISTRY.get_sample_value(
        "sidecar_debug_results_runs_total",
        {"technique": technique, "outcome": outcome, "reason": reason}) or 0.0


def test_the_format_is_the_tickets_techniques_never_the_bodys(tmp_path: Path) -> None:
    perf = client_of(make_service(tmp_path / "perf", {"shop": ["web"]}))
    refused = runs_metric("failed", "wrong-format")
    item = ticket(perf, "shop/web")
    answer = push(perf, "shop/web", {"ticket": item["ticket"], "format": "bpftrace",
                                     "stacks": BPFTRACE})
    assert answer.status_code == 422
    assert "'bpftrace' is not what a perf recording pushes (folded)" in answer.get_json()["error"]
    assert runs_metric("failed", "wrong-format") == refused + 1
    assert not list((tmp_path / "perf").glob("shop/web/*"))
    # bpftrace text without a format field is read as folded, and is not folded stacks.
    clock = Clock()
    perf = client_of(make_service(tmp_path / "perf2", {"shop": ["web"]}, clock=clock))
    item = ticket(perf, "shop/web")
    assert push(perf, "shop/web", {"ticket": item["ticket"], "stacks": BPFTRACE}
                ).status_code == 400
    # A bpftrace-profile ticket refuses folded, and folds bpftrace's map.
    bpf = client_of(make_service(tmp_path / "bpf", {"shop": ["web"]},
                                 annotation=schedule("bpftrace-profile")))
    item = ticket(bpf, "shop/web")
    assert push(bpf, "shop/web", {"ticket": item["ticket"], "format": "folded",
                                  "stacks": "main;fib 5\n"}).status_code == 422
    bpf = client_of(make_service(tmp_path / "bpf2", {"shop": ["web"]},
                                 annotation=schedule("bpftrace-profile")))
    item = ticket(bpf, "shop/web")
    stored = push(bpf, "shop/web", {"ticket": item["ticket"], "format": "bpftrace",
                                    "stacks": BPFTRACE})
    assert stored.status_code == 201, stored.get_json()
    [run] = (tmp_path / "bpf2" / "shop" / "web").iterdir()
    assert (run / "stacks.folded").read_text() == \
        "node;fib;0x7f1234;entry_SYSCALL_64_after_hwframe_[k];do_syscall_64_[k] 42\n"


def _long_frame_bpftrace(length: int) -> str:
    # The old pattern's worst case: a frame line of white space (quadratic: 2.77 s at 40k).
    return "@[\n" + " " * length + "fib\n, node]: 1\n"


@pytest.mark.parametrize(("technique", "stacks", "cap"), [
    ("bpftrace-profile", _long_frame_bpftrace(1 << 20), "characters"),
    ("bpftrace-profile", "@[\n" + "    f\n" * 9000 + ", node]: 1\n", "an entry of more than"),
    ("perf", "main;" + "x" * (service.MAX_FRAME_CHARS + 1) + " 1\n", "a frame name of"),
    ("perf", ";".join(["f"] * 5000) + " 1\n", "5000 frames"),
    ("perf", "".join(f"main;f{i} 1\n" for i in range(service.MAX_STACKS + 1)),
     f"more than {service.MAX_STACKS} distinct stacks"),
    ("bpftrace-profile", "".join(f"@[\n    f{i}\n, node]: 1\n"
                                 for i in range(service.MAX_STACKS + 1)),
     f"more than {service.MAX_STACKS} distinct stacks"),
])
def test_caps_on_frames_depth_and_distinct_stacks(tmp_path: Path, technique: str, stacks: str,
                                                  cap: str) -> None:
    client = client_of(make_service(tmp_path, {"shop": ["web"]},
                                    annotation=schedule(technique, "60s")))
    item = ticket(client, "shop/web")
    started = time.process_time()
    answer = push(client, "shop/web", {"ticket": item["ticket"], "stacks": stacks,
                                       "format": "bpftrace" if "bpf" in technique else "folded"})
    spent = time.process_time() - started
    assert answer.status_code == 413, answer.get_json()
    assert cap in answer.get_json()["error"]
    assert not list(tmp_path.glob("shop/web/2*"))
    assert spent < 5, f"{spent:.1f} s of CPU"  # generous: bench/ has the numbers


def test_a_frame_just_under_the_cap_is_stored(tmp_path: Path) -> None:
    client = client_of(make_service(tmp_path, {"shop": ["web"]},
                                    annotation=schedule("bpftrace-profile")))
    item = ticket(client, "shop/web")
    frame = "x" * service.MAX_FRAME_CHARS
    answer = push(client, "shop/web", {"ticket": item["ticket"], "format": "bpftrace",
                                       "stacks": f"@[\n    {frame}+12\n, node]: 3\n"})
    assert answer.status_code == 201, answer.get_json()


def test_a_push_larger_than_its_tickets_duration_times_frequency_is_refused(
        tmp_path: Path) -> None:
    """The issue's case: a 1 s, 1 Hz schedule stored 2,487,864 samples."""
    clock = Clock()
    subject = make_service(tmp_path, {"shop": ["web"]}, annotation=schedule("perf", "1s", 1),
                           clock=clock)
    client = client_of(subject)
    most = 1 * (1 + service.SAMPLE_SLACK_SECONDS) * service.CPU_MARGIN
    for stacks in ("main;fib 2487864\n", f"main;fib {most}\nmain;gc 1\n",
                   "".join(f"main;f{i % 7} 100\n" for i in range(most))):
        item = ticket(client, "shop/web")
        answer = push(client, "shop/web", {"ticket": item["ticket"], "stacks": stacks})
        assert answer.status_code == 413, answer.get_json()
        assert f"more than {most} samples" in answer.get_json()["error"]
        assert "a push of 1 s at 1 Hz may hold" in answer.get_json()["error"]
        clock.next_minute()
    item = ticket(client, "shop/web")
    assert push(client, "shop/web", {"ticket": item["ticket"],
                                     "stacks": f"main;fib {most}\n"}).status_code == 201


def test_a_body_of_more_json_values_than_a_run_has_is_refused_before_decoding(
        tmp_path: Path) -> None:
    client = client_of(make_service(tmp_path, {"shop": ["web"]}))
    item = ticket(client, "shop/web")
    for hostile in ({"ticket": item["ticket"], "meta": {str(i): 0 for i in range(20_000)}},
                    {"ticket": item["ticket"], "stacks": "a 1\n", "x": [0] * 20_000},
                    {"ticket": item["ticket"], "x": [[[]]] * 5000}):
        answer = push(client, "shop/web", hostile)
        assert answer.status_code == 413 and "JSON values" in answer.get_json()["error"]
    # The ticket was not taken: the real push still goes in. Quotes and commas inside the
    # stacks are text, not values.
    stacks = "".join(f'main;"f",{i} 1\n' for i in range(30_000))
    answer = push(client, "shop/web", {"ticket": item["ticket"], "stacks": stacks,
                                       "meta": {"warnings": ["a"] * 20}})
    assert answer.status_code == 201, answer.get_json()


def _used(root: Path, namespace: str) -> int:
    return sum(f.stat().st_size for f in (root / namespace).rglob("*") if f.is_file())


def test_a_namespace_over_its_quota_loses_its_oldest_runs_and_no_one_elses(
        tmp_path: Path) -> None:
    clock = Clock()
    stacks = "".join(f"main;work;f{i} 3\n" for i in range(400))  # about 7 KiB a run
    quota = 25_000
    subject = make_service(tmp_path, {"greedy": ["web"], "calm": ["db"]}, quota=quota,
                           clock=clock)
    client = client_of(subject)
    calm = ticket(client, "calm/db")
    assert push(client, "calm/db", {"ticket": calm["ticket"], "stacks": stacks}
                ).status_code == 201
    removed = runs_metric("removed", "quota")
    stored = []
    for _ in range(8):
        item = ticket(client, "greedy/web")
        answer = push(client, "greedy/web", {"ticket": item["ticket"], "stacks": stacks})
        assert answer.status_code == 201, answer.get_json()
        stored.append(answer.get_json()["run"])
        clock.next_minute()
    kept = sorted(p.name for p in (tmp_path / "greedy" / "web").iterdir())
    assert 0 < len(kept) < 8 and _used(tmp_path, "greedy") <= quota
    assert [f"greedy/web/{name}" for name in kept] == sorted(stored)[-len(kept):]  # newest
    assert runs_metric("removed", "quota") == removed + 8 - len(kept)
    assert len(list((tmp_path / "calm" / "db").iterdir())) == 1  # another namespace: kept
    assert metrics.REGISTRY.get_sample_value("sidecar_debug_results_namespace_bytes",
                                             {"namespace": "greedy"}) == _used(tmp_path, "greedy")
    # One run larger than the whole quota is refused, and removes nothing.
    item = ticket(client, "greedy/web")
    huge = "".join(f"main;work;f{i} 1\n" for i in range(3000))
    answer = push(client, "greedy/web", {"ticket": item["ticket"], "stacks": huge})
    assert answer.status_code == 413 and "quota of namespace greedy" in answer.get_json()["error"]
    assert sorted(p.name for p in (tmp_path / "greedy" / "web").iterdir()) == kept
    # Retention's pass keeps the per-namespace metric and drops namespaces that are gone.
    subject.apply_retention()
    assert metrics.REGISTRY.get_sample_value("sidecar_debug_results_namespace_bytes",
                                             {"namespace": "calm"}) == _used(tmp_path, "calm")


def test_the_quota_setting(tmp_path: Path) -> None:
    assert quota_bytes("500Mi", tmp_path) == 500 << 20
    assert quota_bytes("2G", tmp_path) == 2 * 10**9
    assert quota_bytes("1048576", tmp_path) == 1 << 20
    assert quota_bytes("0", tmp_path) is None and quota_bytes("", tmp_path) is None
    share = quota_bytes("25%", tmp_path)
    assert share is not None and share > 0
    assert quota_bytes(None, tmp_path) == share  # the default: 25 % of the volume
    for bad in ("25 %", "101%", "1Pi", "-1", "1e9", "9" * 40):
        assert quota_bytes(bad, tmp_path) == share


def test_pushes_take_a_slot_of_their_namespace_and_of_the_service(tmp_path: Path) -> None:
    names = {f"ns-{i}": ["web"] for i in range(service.PUSHES_IN_FLIGHT + 1)}
    subject = make_service(tmp_path, names)
    client = client_of(subject)
    tickets = {space: ticket(client, f"{space}/web") for space in names}
    busy = metrics.REGISTRY.get_sample_value("sidecar_debug_results_pushes_refused_total",
                                             {"reason": "busy"}) or 0
    with subject.slots.hold("ns-0"):
        answer = push(client, "ns-0/web", {"ticket": tickets["ns-0"]["ticket"],
                                           "stacks": "main 1\n"})
        assert answer.status_code == 429
        assert answer.headers["Retry-After"] == str(service.RETRY_AFTER_SECONDS)
        assert "namespace ns-0 has as many pushes in flight" in answer.get_json()["error"]
        # Another namespace pushes meanwhile; the refused push kept its ticket.
        assert push(client, "ns-1/web", {"ticket": tickets["ns-1"]["ticket"],
                                          "stacks": "main 1\n"}).status_code == 201
        with subject.slots.hold("ns-1"):  # all slots of the service taken
            answer = push(client, "ns-2/web", {"ticket": tickets["ns-2"]["ticket"],
                                               "stacks": "main 1\n"})
            assert answer.status_code == 429 and "the results service" in \
                answer.get_json()["error"]
    assert push(client, "ns-0/web", {"ticket": tickets["ns-0"]["ticket"],
                                     "stacks": "main 1\n"}).status_code == 201
    assert metrics.REGISTRY.get_sample_value("sidecar_debug_results_pushes_refused_total",
                                             {"reason": "busy"}) == busy + 2
    assert subject.slots.held == {}


def test_a_parse_past_its_deadline_stops() -> None:
    limits = folded.Limits(deadline=time.monotonic() - 1)
    with pytest.raises(folded.TooLarge, match="time budget"):
        folded.parse("main;fib 1\n" * 1000, limits)
