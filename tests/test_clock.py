"""Tests for simulator.population.clock: cost model, round policies and the virtual clock."""

from __future__ import annotations

import numpy as np
import pytest

from simulator.policies import POLICIES, Arrival, make_policy
from simulator.policies.deadline import Deadline
from simulator.policies.deadline_carryover import DeadlineCarryover
from simulator.policies.first_k import FirstK
from simulator.policies.wait_for_all import WaitForAll
from simulator.population.clock import (
    VirtualClock,
    arrivals_from_durations,
    compute_seconds,
    transfer_seconds,
)


def ids(arrivals: tuple[Arrival, ...]) -> list[int]:
    return [a.client_id for a in arrivals]


# Round 3 starts at t=100; sorted order is (101, 1), (103, 2), (103, 4), (104, 5), (112, 3).
NEW = [
    Arrival(5, 3, 104.0),
    Arrival(2, 3, 103.0),
    Arrival(4, 3, 103.0),
    Arrival(1, 3, 101.0),
    Arrival(3, 3, 112.0),
]


def test_compute_seconds_exact() -> None:
    assert compute_seconds(100, 2, 5.0) == 3.0
    assert compute_seconds(100, 2, 5.0, factor=1.0) == 1.0
    out = compute_seconds(np.array([100, 200]), 1, np.array([5.0, 1.0]))
    np.testing.assert_array_equal(out, [1.5, 0.6])


def test_transfer_seconds_exact() -> None:
    # 1 MB = 8000 kbit: 8000/8000 = 1 s down, 8000/1000 = 8 s up, 2 * 50 ms latency.
    mb = 1_000_000
    assert transfer_seconds(mb, mb, up_kbps=1000.0, down_kbps=8000.0, latency_ms=0.0) == 9.0
    t = transfer_seconds(mb, mb, up_kbps=1000.0, down_kbps=8000.0, latency_ms=50.0)
    assert t == 8.0 + 1.0 + 0.1
    out = transfer_seconds(
        mb, mb, up_kbps=np.array([1000.0, 8000.0]), down_kbps=8000.0, latency_ms=np.zeros(2)
    )
    np.testing.assert_array_equal(out, [9.0, 2.0])
    # download and upload sizes differ (a compressed upload): 1 MB down at 8000 kbit/s is 1 s,
    # 0.25 MB up at 1000 kbit/s is 2 s; per-client arrays broadcast
    t = transfer_seconds(mb, mb / 4, up_kbps=1000.0, down_kbps=8000.0, latency_ms=0.0)
    assert t == 3.0
    out = transfer_seconds(
        np.array([mb, 0.0]), np.array([0.0, mb]), up_kbps=1000.0, down_kbps=8000.0, latency_ms=0
    )
    np.testing.assert_array_equal(out, [1.0, 8.0])


@pytest.mark.parametrize(
    "call, name",
    [
        (lambda: compute_seconds(-1, 1, 5.0), "samples"),
        (lambda: compute_seconds(1, 1, np.nan), "ms_per_sample"),
        (lambda: compute_seconds(1, 1, 5.0, factor=0), "factor"),
        (lambda: transfer_seconds(10, 10, up_kbps=0.0, down_kbps=1.0, latency_ms=0.0), "up_kbps"),
        (
            lambda: transfer_seconds(
                10, 10, up_kbps=1.0, down_kbps=np.array([1.0, -2.0]), latency_ms=0.0
            ),
            "down_kbps",
        ),
        (lambda: transfer_seconds(10, 10, up_kbps=1, down_kbps=1, latency_ms=-5.0), "latency_ms"),
        (lambda: transfer_seconds(-1, 10, up_kbps=1, down_kbps=1, latency_ms=0), "download_bytes"),
        (
            lambda: transfer_seconds(10, np.nan, up_kbps=1, down_kbps=1, latency_ms=0),
            "upload_bytes",
        ),
    ],
)
def test_cost_validation(call, name: str) -> None:
    with pytest.raises(ValueError, match=name):
        call()


def test_arrivals_from_durations() -> None:
    got = arrivals_from_durations([7, 9], np.array([1.5, 0.25]), round_idx=2, round_start=10.0)
    assert got == (Arrival(7, 2, 11.5), Arrival(9, 2, 10.25))
    with pytest.raises(ValueError, match="shape"):
        arrivals_from_durations([7], [1.0, 2.0], round_idx=0, round_start=0.0)


def test_wait_for_all() -> None:
    out = WaitForAll().close_round(3, 100.0, NEW, [])
    assert out.round_end == 112.0
    assert ids(out.arrived) == [1, 2, 4, 5, 3]
    assert out.dropped == () and out.pending == ()
    empty = WaitForAll().close_round(0, 7.0, [], [])
    assert empty.round_end == 7.0 and empty.arrived == ()


def test_deadline_drops_late_and_counts_exact_deadline() -> None:
    out = Deadline(5.0).close_round(3, 100.0, NEW, [])
    assert out.round_end == 105.0
    assert ids(out.arrived) == [1, 2, 4, 5] and ids(out.dropped) == [3] and out.pending == ()
    out = Deadline(3.0).close_round(3, 100.0, NEW, [])
    assert out.round_end == 103.0
    assert ids(out.arrived) == [1, 2, 4] and ids(out.dropped) == [5, 3]


def test_deadline_ends_early_when_everything_landed() -> None:
    out = Deadline(20.0).close_round(3, 100.0, NEW, [])
    assert out.round_end == 112.0 and len(out.arrived) == 5 and out.dropped == ()


def test_first_k_tie_broken_by_client_id() -> None:
    out = FirstK(2).close_round(3, 100.0, NEW, [])
    assert out.round_end == 103.0
    assert ids(out.arrived) == [1, 2] and ids(out.dropped) == [4, 5, 3]
    out = FirstK(3).close_round(3, 100.0, NEW, [])
    assert out.round_end == 103.0 and ids(out.arrived) == [1, 2, 4]


def test_first_k_with_fewer_than_k_waits_for_all() -> None:
    out = FirstK(10).close_round(3, 100.0, NEW, [])
    assert out.round_end == 112.0 and len(out.arrived) == 5 and out.dropped == ()


def test_carryover_late_update_arrives_stale_then_staleness_drop() -> None:
    policy = DeadlineCarryover(deadline_s=5.0, max_staleness=2)
    r3 = policy.close_round(3, 100.0, NEW, [])
    assert r3.round_end == 105.0
    assert ids(r3.arrived) == [1, 2, 4, 5] and r3.dropped == ()
    assert r3.pending == (Arrival(3, 3, 112.0),)
    # Round 4: client 3 (t=112) and new client 7 (t=130) land after the 110 deadline.
    r4 = policy.close_round(4, 105.0, [Arrival(6, 4, 108.0), Arrival(7, 4, 130.0)], r3.pending)
    assert r4.round_end == 110.0
    assert ids(r4.arrived) == [6] and ids(r4.pending) == [3, 7] and r4.dropped == ()
    # Round 5: client 3 arrives, still with base_round 3 (staleness 2).
    r5 = policy.close_round(5, 110.0, [Arrival(8, 5, 113.0)], r4.pending)
    assert r5.round_end == 115.0
    assert r5.arrived == (Arrival(3, 3, 112.0), Arrival(8, 5, 113.0))
    assert ids(r5.pending) == [7]
    # Round 6: client 7 misses the 120 deadline; in round 7 it would have staleness 3 > 2.
    r6 = policy.close_round(6, 115.0, [], r5.pending)
    assert r6.round_end == 120.0
    assert r6.arrived == () and r6.pending == () and r6.dropped == (Arrival(7, 4, 130.0),)


def test_carryover_too_stale_is_dropped_without_holding_the_round() -> None:
    policy = DeadlineCarryover(deadline_s=5.0, max_staleness=2)
    out = policy.close_round(10, 100.0, [Arrival(1, 10, 101.0)], [Arrival(2, 7, 102.0)])
    assert out.round_end == 101.0
    assert ids(out.arrived) == [1] and ids(out.dropped) == [2] and out.pending == ()


def test_carryover_with_zero_staleness_matches_deadline() -> None:
    a = DeadlineCarryover(5.0, max_staleness=0).close_round(3, 100.0, NEW, [])
    b = Deadline(5.0).close_round(3, 100.0, NEW, [])
    assert a == b


def test_update_from_a_future_round_is_rejected() -> None:
    with pytest.raises(ValueError, match="later round"):
        WaitForAll().close_round(2, 0.0, [Arrival(1, 3, 1.0)], [])


def test_make_policy_builds_each_policy() -> None:
    assert set(POLICIES) == {
        "wait_for_all",
        "deadline",
        "deadline_carryover",
        "first_k",
        "overcommit",
        "fedbuff",
        "fedasync",
    }
    assert isinstance(make_policy("wait_for_all"), WaitForAll)
    assert make_policy("deadline", deadline_s=2.5) == Deadline(2.5)
    assert make_policy("deadline_carryover", deadline_s=1.0).max_staleness == 5
    assert make_policy("first_k", k=3) == FirstK(3)
    # k = 0 is 80% of the cohort, resolved when the cohort size is known
    assert make_policy("first_k", clients_per_round=10) == FirstK(8)
    assert make_policy("first_k", clients_per_round=1) == FirstK(1)


@pytest.mark.parametrize(
    "name, params, pattern",
    [
        ("fastest", {}, "first_k.*wait_for_all|wait_for_all.*first_k"),
        ("deadline", {"deadline": 3.0}, "deadline_s"),
        ("deadline", {}, "missing.*deadline_s"),
        ("wait_for_all", {"k": 2}, "unknown parameter 'k'"),
        ("deadline", {"deadline_s": 0.0}, "deadline_s"),
        ("deadline_carryover", {"deadline_s": -1.0}, "deadline_s"),
        ("deadline_carryover", {"deadline_s": 1.0, "max_staleness": -1}, "max_staleness"),
        ("first_k", {"k": -1}, "k must be"),
        ("first_k", {"k": 1.5}, "k must be"),
    ],
)
def test_make_policy_errors(name: str, params: dict, pattern: str) -> None:
    with pytest.raises(ValueError, match=pattern):
        make_policy(name, **params)


def test_virtual_clock_is_monotone() -> None:
    clock = VirtualClock()
    assert clock.advance_to(5.0) == 5.0
    assert clock.advance_to(5.0) == 5.0
    assert clock.advance_by(2.5) == 7.5
    with pytest.raises(ValueError):
        clock.advance_to(7.0)
    with pytest.raises(ValueError):
        clock.advance_by(-1.0)
    with pytest.raises(ValueError):
        clock.advance_to(float("nan"))
    assert clock.now == 7.5
