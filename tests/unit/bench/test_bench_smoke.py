"""The benchmark's code paths at a tiny scale (bench/, `make bench`): no timing assertions,
only that every section runs and reports. The served part needs wrk (scripts/setup.sh)."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path
from typing import Any

import pytest

from bench import __main__ as bench_main
from bench import loadgen, null_app, pods, report, scaling, servers, stub_api
from webhook.admission.review import decode_patch


def test_pod_shapes_match_the_issue() -> None:
    large = pods.large_pod()
    assert len(large["spec"]["containers"]) == 30
    assert len(large["spec"]["volumes"]) == 60
    assert len(large["metadata"]["annotations"]) == 200
    review = json.loads(pods.review_body("typical"))
    assert review["request"]["object"]["spec"]["containers"][0]["name"] == "web"


def test_reviews_inject_in_process() -> None:
    m = scaling.mutator()
    for shape in pods.POD_SHAPES:
        review: Any = m.review(json.loads(pods.review_body(shape)))
        assert review["response"]["allowed"] is True
        assert decode_patch(review), shape


def test_null_app_echoes_the_uid() -> None:
    body = pods.review_body("typical")
    uid = json.loads(body)["request"]["uid"]
    status: list[str] = []
    out = null_app.app({"CONTENT_LENGTH": str(len(body)), "wsgi.input": io.BytesIO(body),
                        "PATH_INFO": "/mutate"}, lambda s, h: status.append(s))
    answer = json.loads(b"".join(out))
    assert status == ["200 OK"]
    assert answer["response"] == {"uid": uid, "allowed": True}


def test_null_app_with_the_fixed_patch_answers_the_webhooks_patch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """bench/e2e.py's `fixed-patch` mode: the real patch, computed once, every uid echoed."""
    monkeypatch.setenv("BENCH_FIXED_PATCH", "1")
    monkeypatch.setenv("SIDECAR_DEBUG_DEFAULT_PROFILE", "lttng")  # as bench/e2e.py sets it
    monkeypatch.setattr(null_app, "_fixed", [])
    answers = []
    for _ in range(2):
        body = pods.review_body("typical")
        out = null_app.app({"CONTENT_LENGTH": str(len(body)), "wsgi.input": io.BytesIO(body),
                            "PATH_INFO": "/mutate"}, lambda s, h: None)
        answer = json.loads(b"".join(out))
        assert answer["response"]["uid"] == json.loads(body)["request"]["uid"]
        answers.append(answer["response"]["patch"])
    from webhook.admission.mutate import Mutator
    from webhook.config import load_settings

    expected = Mutator(load_settings()).review(json.loads(pods.review_body("typical")))
    assert answers[0] == answers[1]
    assert decode_patch(expected) == json.loads(base64.b64decode(answers[0]))


def test_scaling_fit_and_targets_render() -> None:
    result = scaling.scaling(sizes=(1, 3, 5), budget_s=0.01)
    assert [r["containers"] for r in result["rows"]] == [1, 3, 5]
    assert set(result["fit"]) == {"intercept_ms", "ms_per_container", "r2"}
    assert scaling.fit([1, 2, 3], [2, 4, 6])["ms_per_container"] == 2.0
    text = report.render({"scaling": result, "targets": report.targets({"scaling": result})})
    assert "Scaling" in text and "Targets" in text


def test_guard_core_section_measures_the_injected_pods_and_renders() -> None:
    from bench import guard_core

    results = guard_core.guard_cost(budget_s=0.01, passes=1)
    assert [(r["shape"], r["level"]) for r in results["rows"]] == [
        ("typical", "baseline"), ("typical", "restricted"), ("large", "baseline"),
        ("large", "restricted")]
    assert all(r["toolset_verified"] and r["python_calls"] > 0 for r in results["rows"])
    assert [r["violations"] for r in results["rows"] if r["level"] == "baseline"] == [0, 0]
    text = report.render({"guard_core": results})
    assert "Guard core: CPU time of the pure decision per pod" in text
    targets = report.targets({"guard_core": results})
    assert [t["target"].split(",")[1].strip() for t in targets] == [
        "typical (2 containers)", "large (31 containers)"]


def test_wrk_summary_parsing() -> None:
    line = ('BENCH-JSON {"requests":100,"duration_us":2000000,"bytes":1,"p50_us":1500,'
            '"p90_us":2000,"p99_us":3000,"p999_us":4000,"mean_us":1600.0,"max_us":5000,'
            '"errors":{"connect":0,"read":0,"write":0,"status":0,"timeout":0}}')
    result = loadgen.parse("Running 2s test\n" + line + "\n", 8)
    assert result.rps == 50.0 and result.p99_ms == 3.0


def test_stub_api_answers_the_policy_gate(tmp_path: Path) -> None:
    from webhook.kube.access import KubernetesClusterAPI, service_account_check

    with stub_api.stub_api(tmp_path) as kubeconfig:
        api = KubernetesClusterAPI(kubeconfig=str(kubeconfig))
        assert api.access_allowed(service_account_check("bench", "default", "full"), 5) is False
        assert api.namespace_labels("bench", 5) == {"debug": "enabled"}


@pytest.mark.skipif(not loadgen.wrk_available(), reason="wrk missing (scripts/setup.sh)")
def test_served_sections_end_to_end(tmp_path: Path) -> None:
    """The handler section (webhook and null handler over TLS, wrk) and the JSON/table report,
    1 s per point. (The memory section is the same servers and wrk, plus the readers below.)"""
    results = bench_main.run(bench_main.arguments([
        "--sections", "handler", "--seconds", "1", "--concurrency", "2", "--shapes", "typical",
        "--workers", "1", "--threads", "2", "--quick", "--handler-rounds", "2",
        "--out", str(tmp_path), "--name", "smoke"]))
    points = results["handler"]["points"]
    assert {p["server"] for p in points} == {"webhook", "null-flask", "null"}
    assert sorted(p["round"] for p in points) == [0, 0, 0, 1, 1, 1]
    rounds = results["handler"]["comparisons"][0]["rounds_rps"]
    assert [len(rounds[s]) for s in ("webhook", "null-flask", "null")] == [2, 2, 2]
    assert all(p["requests"] > 0 and not any(p["errors"].values()) for p in points)
    saved = json.loads(Path(results["json"]).read_text())
    assert saved["handler"]["comparisons"][0]["shape"] == "typical"
    assert "Handler cost" in report.render(results)
    assert saved["handler"]["comparisons"][0]["null_flask_cpu_ms"] is not None


@pytest.mark.skipif(not loadgen.wrk_available(), reason="wrk missing (scripts/setup.sh)")
def test_slow_clients_section(tmp_path: Path) -> None:
    results = bench_main.run(bench_main.arguments([
        "--sections", "slow-clients", "--seconds", "1", "--slow-clients", "0,4",
        "--slow-configs", "balanced:1x2", "--out", str(tmp_path), "--name", "smoke"]))
    rows = results["slow_clients"]
    assert [r["slow_clients"] for r in rows] == [0, 4]
    assert all(r["requests"] > 0 for r in rows)
    assert rows[1]["slow_opened"] >= 4
    assert "Slow clients" in report.render(results)


def test_null_flask_app_echoes_the_uid() -> None:
    body = pods.review_body("typical")
    reply = null_app.flask_app.test_client().post(
        "/mutate", data=body, content_type="application/json")
    assert reply.get_json()["response"] == {
        "uid": json.loads(body)["request"]["uid"], "allowed": True}


def test_process_readers() -> None:
    import os

    assert servers.rss_kib(os.getpid()) > 0
    assert servers.cpu_seconds([os.getpid()]) > 0


def test_certificates_and_patch_shape(tmp_path: Path) -> None:
    ca, cert, key = servers.make_certs(tmp_path)
    assert ca.exists() and cert.exists() and key.exists()
    review: Any = scaling.mutator().review(json.loads(pods.review_body("large")))
    ops = json.loads(base64.b64decode(review["response"]["patch"]))
    # The sidecar goes in front as one add, not 30 containers rewritten.
    assert {"op": "add", "path": "/spec/containers/0"} in [
        {"op": o["op"], "path": o["path"]} for o in ops]


def test_targets_hold_the_issue_14_goals() -> None:
    """The typical pod at concurrency 8 must reach 1,000 reviews/s; Flask's CPU per review is
    the null Flask app's minus the plain null handler's."""
    def comparison(rps: float) -> dict[str, Any]:
        return {"shape": "typical", "concurrency": 8, "webhook_rps": rps, "null_rps": 2 * rps,
                "webhook_p99_ms": 10.0, "null_p99_ms": 9.0, "p99_delta_ms": 1.0,
                "webhook_cpu_ms": 0.9, "null_cpu_ms": 0.3, "null_flask_cpu_ms": 0.45}

    def rows(rps: float) -> dict[str, Any]:
        handler = {"comparisons": [comparison(rps)],
                   "points": [{"server": "webhook", "shape": "typical", "rps": rps,
                               "cpu_ms_per_review": 0.9}]}
        return {t["target"]: t for t in report.targets({"handler": handler})}

    assert rows(1001)["throughput, typical pod, concurrency 8"]["met"] is True
    assert rows(999)["throughput, typical pod, concurrency 8"]["met"] is False
    flask = next(t for name, t in rows(1001).items() if name.startswith("Flask's CPU"))
    assert flask["value"].startswith("+0.150 ms")
