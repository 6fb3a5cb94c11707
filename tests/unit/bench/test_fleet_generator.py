"""The fleet bench's load generator asks as results-agent does: after a plan, the wait its
pollSeconds says (5-600 s, else the agent's 20 s); after a plan with a run, the run's seconds,
the push, and only then the wait (Agent.once), never a plan right after the push; its
connection closed before a wait over 30 s only, as Agent.run does."""

from __future__ import annotations

import time
from typing import Any

from bench.fleet import DEFAULT_POLL, Agents


class FakeClient:
    def __init__(self, answers: list[tuple[int, Any]]) -> None:
        self.answers = answers
        self.calls: list[tuple[str, str]] = []

    def close(self) -> None:
        self.calls.append(("CLOSE", ""))

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        self.calls.append((method, path))
        return self.answers.pop(0)


def next_due(agents: Agents, index: int) -> tuple[float, str]:
    when, _, kind, _ = min(entry for entry in agents.due if entry[1] == index)
    return when, kind


def test_the_generator_waits_as_the_agent_does() -> None:
    run = {"ticket": "t", "seconds": 7, "technique": "perf", "frequency": 99}
    clients = [FakeClient([(200, {"runs": [], "pollSeconds": 60})]),
               FakeClient([(200, {"runs": [run], "pollSeconds": 42}), (201, {})]),
               FakeClient([(200, {"runs": [], "pollSeconds": 3})]),
               FakeClient([(503, {"error": "starting"})])]
    agents = Agents(clients, poll=60)
    agents.due.clear()
    for index in range(4):
        began = time.monotonic()
        agents._plan(index)
        when, kind = next_due(agents, index)
        expected = {0: (60, "plan"), 1: (7, "push"), 2: (DEFAULT_POLL, "plan"),
                    3: (DEFAULT_POLL, "plan")}[index]
        assert kind == expected[1] and abs(when - began - expected[0]) < 1, index
    _, _, _, item = next(e for e in agents.due if e[1] == 1)
    agents.due.clear()
    pushed = time.monotonic()
    agents._push(1, item)
    when, kind = next_due(agents, 1)
    assert kind == "plan" and abs(when - pushed - 42) < 1  # the plan's wait, after the push
    # The connection kept from the plan to the push, closed before the long wait only.
    assert clients[1].calls == [("GET", "/agent/v1/plan"), ("POST", "/agent/v1/runs"),
                                ("CLOSE", "")]
    assert clients[0].calls == [("GET", "/agent/v1/plan"), ("CLOSE", "")]
    assert clients[3].calls == [("GET", "/agent/v1/plan")]  # 20 s: kept
    agents.pool.shutdown()
