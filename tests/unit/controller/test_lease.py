"""Leader election through a Lease, against the fake API with a clock the test moves."""

from __future__ import annotations

from tests.unit.controller.fake import Clock, FakeApi
from webhook.controller import metrics
from webhook.controller.lease import LeaderElector, Timing

NS, NAME = "sidecar-debug", "sd-controller"
TIMING = Timing(lease_duration=15, renew_deadline=10, retry_period=2)


def elector(api: FakeApi, clock: Clock, identity: str,
            changes: list[tuple[str, bool]] | None = None) -> LeaderElector:
    def on_change(leader: bool) -> None:
        if changes is not None:
            changes.append((identity, leader))

    return LeaderElector(api, NS, NAME, identity, TIMING, monotonic=clock.monotonic,
                         wall_clock=clock.wall, on_change=on_change)


def holder(api: FakeApi) -> str:
    return str(api.leases[(NS, NAME)]["spec"]["holderIdentity"])


def test_the_first_replica_creates_the_lease_and_the_second_waits() -> None:
    api, clock = FakeApi(), Clock()
    changes: list[tuple[str, bool]] = []
    one, two = elector(api, clock, "one", changes), elector(api, clock, "two", changes)
    one.step()
    two.step()
    assert one.is_leader and not two.is_leader
    assert changes == [("one", True)]
    spec = api.leases[(NS, NAME)]["spec"]
    assert spec["holderIdentity"] == "one" and spec["leaseDurationSeconds"] == 15
    assert spec["leaseTransitions"] == 0 and spec["renewTime"].endswith("Z")
    assert metrics.REGISTRY.get_sample_value("sidecar_debug_controller_leader") == 1.0


def test_renewals_keep_the_lease_and_the_standby_never_takes_it() -> None:
    api, clock = FakeApi(), Clock()
    one, two = elector(api, clock, "one"), elector(api, clock, "two")
    one.step()
    for _ in range(30):  # 60 s, four lease durations
        clock.advance(2)
        one.step()
        two.step()
        assert one.is_leader and not two.is_leader
    assert holder(api) == "one"
    assert api.leases[(NS, NAME)]["spec"]["leaseTransitions"] == 0


def test_a_dead_leader_is_replaced_after_the_lease_duration_not_before() -> None:
    api, clock = FakeApi(), Clock()
    changes: list[tuple[str, bool]] = []
    one, two = elector(api, clock, "one", changes), elector(api, clock, "two", changes)
    one.step()
    two.step()  # two sees one's record now
    # one dies (no more steps). two keeps trying every retry period.
    waited = 0.0
    while not two.is_leader:
        clock.advance(2)
        waited += 2
        two.step()
        assert waited <= 20, "never took over"
    assert 15 <= waited <= 15 + 2  # the lease duration, plus at most one retry period
    spec = api.leases[(NS, NAME)]["spec"]
    assert spec["holderIdentity"] == "two" and spec["leaseTransitions"] == 1
    # one comes back (a long pause): it sees two's lease and does not act.
    one.step()
    assert not one.is_leader and ("one", False) in changes


def test_a_leader_that_cannot_renew_stops_within_the_renew_deadline() -> None:
    api, clock = FakeApi(), Clock()
    changes: list[tuple[str, bool]] = []
    one = elector(api, clock, "one", changes)
    one.step()
    api.down = True
    clock.advance(8)
    one.step()
    assert one.is_leader  # 8 s < the 10 s renew deadline
    clock.advance(2.5)
    assert not one.is_leader  # at once, before the next step: it must not act any more
    one.step()
    assert changes == [("one", True), ("one", False)]
    assert metrics.REGISTRY.get_sample_value("sidecar_debug_controller_leader") == 0.0
    # Stopping before the lease duration runs out: nobody else can hold it yet.
    assert TIMING.renew_deadline < TIMING.lease_duration


def test_release_hands_over_without_waiting_for_expiry() -> None:
    api, clock = FakeApi(), Clock()
    one, two = elector(api, clock, "one"), elector(api, clock, "two")
    one.step()
    two.step()
    one.release()
    assert holder(api) == "" and not one.is_leader
    clock.advance(2)
    two.step()
    assert two.is_leader and holder(api) == "two"


def test_a_write_conflict_means_someone_else_won() -> None:
    api, clock = FakeApi(), Clock()
    one, two = elector(api, clock, "one"), elector(api, clock, "two")
    one.step()
    one.release()

    def one_takes_it_back() -> None:
        clock.advance(0.1)
        one.step()

    api.before_write = one_takes_it_back  # between two's read and two's write
    two.step()
    assert one.is_leader and not two.is_leader and holder(api) == "one"


def test_timing_rules_are_checked() -> None:
    assert not Timing(15, 10, 2).problems()
    assert any("shorter than the lease duration" in p for p in Timing(10, 10, 2).problems())
    assert any("retry period" in p for p in Timing(15, 10, 10).problems())
    assert any("whole number" in p for p in Timing(7.5, 5, 1).problems())
