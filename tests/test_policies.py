"""The round policies of simulator/policies/ with arrival times worked by hand, and their use in
the engine (over-commitment, buffered and per-arrival asynchronous steps, wasted compute)."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest
import torch

from simulator.config.fields import ConfigError
from simulator.config.sections import Config, build_config
from simulator.policies import Arrival, make_policy
from simulator.policies.fedbuff import staleness_weight
from simulator.round.engine import Simulation

MakeConfig = Callable[..., Config]


def ids(arrivals: tuple[Arrival, ...]) -> list[int]:
    return [a.client_id for a in arrivals]


def test_overcommit_selects_ceil_r_k_and_keeps_the_first_k() -> None:
    p = make_policy("overcommit", clients_per_round=2, ratio=1.5)
    assert p.cohort(2, 0) == 3  # ceil(1.5 * 2)
    assert make_policy("overcommit", clients_per_round=10).cohort(10, 0) == 13  # FedScale's 1.3
    new = [Arrival(1, 0, 5.0), Arrival(2, 0, 3.0), Arrival(3, 0, 9.0)]
    out = p.close_round(0, 0.0, new, [])
    assert ids(out.arrived) == [2, 1] and ids(out.dropped) == [3] and out.pending == ()
    assert out.round_end == 5.0  # the 2nd arrival


def test_first_k_waits_for_the_kth_and_drops_the_rest() -> None:
    p = make_policy("first_k", k=2)
    out = p.close_round(
        3, 10.0, [Arrival(4, 3, 12.0), Arrival(5, 3, 11.0), Arrival(6, 3, 30.0)], []
    )
    assert ids(out.arrived) == [5, 4] and ids(out.dropped) == [6] and out.round_end == 12.0


def test_fedbuff_tops_up_to_concurrency_and_steps_every_k() -> None:
    p = make_policy("fedbuff", k=2, concurrency=4)
    assert p.cohort(100, 1) == 3 and p.cohort(100, 4) == 0 and p.cohort(100, 6) == 0
    # step 3 starts at t=9: clients 1, 2 start now; 7 and 8 are in flight from steps 1 and 2
    new = [Arrival(1, 3, 10.0), Arrival(2, 3, 12.0)]
    pending = [Arrival(7, 1, 11.0), Arrival(8, 2, 15.0)]
    out = p.close_round(3, 9.0, new, pending)
    assert ids(out.arrived) == [1, 7] and out.round_end == 11.0
    assert ids(out.pending) == [2, 8] and out.dropped == ()
    # staleness 3 - 3 = 0 and 3 - 1 = 2: weights 1 and 1/sqrt(3)
    rows = torch.tensor([[2.0, -4.0], [3.0, 6.0]])
    adj = p.adjust_rows(rows, np.array([0, 2]), lambda: torch.zeros(2, 2))
    s3 = 1.0 / math.sqrt(3.0)
    assert torch.allclose(adj, torch.tensor([[2.0, -4.0], [3.0 * s3, 6.0 * s3]]))
    np.testing.assert_allclose(staleness_weight(np.array([0, 1, 3])), [1.0, 2**-0.5, 0.5])


def test_fedbuff_with_fewer_than_k_in_flight_waits_for_all() -> None:
    out = make_policy("fedbuff", k=3, concurrency=5).close_round(
        0, 0.0, [Arrival(1, 0, 4.0), Arrival(2, 0, 2.0)], []
    )
    assert ids(out.arrived) == [2, 1] and out.round_end == 4.0 and out.pending == ()


def test_fedasync_mixes_one_arrival_per_step() -> None:
    p = make_policy("fedasync", clients_per_round=3)  # alpha 0.6, a 0.5
    assert p.concurrency == 3 and p.cohort(3, 2) == 1
    out = p.close_round(5, 1.0, [Arrival(9, 5, 4.0)], [Arrival(3, 2, 2.5), Arrival(4, 4, 3.0)])
    assert ids(out.arrived) == [3] and out.round_end == 2.5 and ids(out.pending) == [4, 9]
    # staleness 3: alpha_t = 0.6 * 4 ** -0.5 = 0.3; step = 0.3 * (row + base - global)
    rows = torch.tensor([[1.0, 2.0]])
    adj = p.adjust_rows(rows, np.array([3]), lambda: torch.tensor([[0.5, -1.0]]))
    assert torch.allclose(adj, torch.tensor([[0.45, 0.3]]))
    np.testing.assert_allclose(
        p.mixing_weight(np.array([0, 1, 2])), [0.6, 0.6 / math.sqrt(2), 0.6 / math.sqrt(3)]
    )


@pytest.mark.parametrize(
    "name, params, pattern",
    [
        ("overcommit", {"ratio": 0.9}, "ratio must be a finite number >= 1"),
        ("fedbuff", {"k": 0}, "k must be an int > 0"),
        ("fedbuff", {"k": 5, "concurrency": 3}, "k \\(5\\) must be <= concurrency \\(3\\)"),
        ("fedasync", {"alpha": 1.5}, "alpha must be"),
        (
            "fedasync",
            {"beta": 1},
            "unknown parameter 'beta'; valid: \\['a', 'alpha', 'concurrency'\\]",
        ),
        ("slowest", {}, "unknown round policy 'slowest'; valid: \\['deadline'"),
    ],
)
def test_bad_policy_parameters_name_the_field(name: str, params: dict, pattern: str) -> None:
    with pytest.raises(ValueError, match=pattern):
        make_policy(name, **params)


def test_config_validates_policy_parameters_up_front() -> None:
    with pytest.raises(
        ConfigError,
        match="clock.policy_params: round policy 'fedbuff': unknown parameter 'kk'",
    ):
        build_config(flat={"round_policy": "fedbuff", "policy_params": {"kk": 2}})
    c = build_config(
        flat={"round_policy": "deadline", "deadline_s": 7.0, "policy_params": {"deadline_s": 9.0}}
    )
    from simulator.config.plugins import policy_of

    assert policy_of(c.clock).deadline_s == 9.0  # the map overrides the field


def run(cfg: Config) -> tuple[list, Simulation]:
    sim = Simulation(cfg)
    try:
        return sim.run(), sim
    finally:
        sim.close()


def test_fedbuff_engine_steps_every_k_with_at_most_concurrency_in_flight(
    make_config: MakeConfig,
) -> None:
    cfg = make_config(
        "fb",
        num_clients=20,
        clients_per_round=6,
        rounds=8,
        round_policy="fedbuff",
        policy_params={"k": 2},
    )
    recs, sim = run(cfg)
    in_flight = 0
    for r in recs:
        assert r.extra["aggregated"] == 2  # one server step per 2 updates
        in_flight += len(r.selected)
        assert in_flight <= 6  # concurrency = cohort size
        in_flight -= r.extra["aggregated"]
        assert r.extra["round_start"] <= r.virtual_time
        # staleness = step - step the client started; the fresh ones started this step
        assert len(r.stale) == sum(s > 0 for s in r.extra["staleness"])
        assert all(0 <= s <= r.round for s in r.extra["staleness"])
    assert len(recs[0].selected) == 6 and all(len(r.selected) == 2 for r in recs[1:])
    assert len(sim.in_flight) == 4
    # a past global model is kept only while an update trained from it is in flight
    # kept: the last max_staleness (5) steps and the bases of the updates still in flight
    kept = {f.arrival.base_round for f in sim.in_flight} | set(range(2, 8))
    kept |= {7 - s for s in recs[-1].extra["staleness"]}  # read by the last step
    assert set(sim.history) <= kept
    assert min(sim.history) == min(kept)  # older ones are gone


def test_fedasync_engine_mixes_one_update_per_step(make_config: MakeConfig) -> None:
    cfg = make_config(
        "fa",
        num_clients=12,
        clients_per_round=3,
        rounds=6,
        round_policy="fedasync",
        defense="fedavg",
    )
    sim = Simulation(cfg)
    try:
        before = sim.global_flat.clone()
        rec = sim.run_round(0, 0.0)
        assert rec.extra["aggregated"] == 1 and rec.extra["staleness"] == [0]
        # fresh update: x_1 = x_0 + 0.6 * row (alpha_t = 0.6 at staleness 0)
        (c,) = rec.participants
        assert rec.rows is not None
        row = rec.rows.updates[0]  # the adjusted row
        assert torch.allclose(sim.global_flat, before + row, atol=1e-6)
        for rnd in range(1, 6):
            r = sim.run_round(rnd, 0.0)
            assert r.extra["aggregated"] == 1
    finally:
        sim.close()


def test_overcommit_engine_aggregates_k_of_ceil_rk(make_config: MakeConfig) -> None:
    recs, _ = run(
        make_config(
            "oc",
            num_clients=20,
            clients_per_round=4,
            rounds=3,
            round_policy="overcommit",
            policy_params={"ratio": 1.5},
        )
    )
    for r in recs:
        assert len(r.selected) == 6 and r.extra["aggregated"] == 4 and len(r.dropped) == 2


def test_wasted_compute_is_the_dropped_updates_compute(make_config: MakeConfig) -> None:
    cfg = make_config(
        "dl",
        num_clients=20,
        clients_per_round=8,
        rounds=3,
        local_epochs=2,
        round_policy="deadline",
        deadline_s=2.0,
    )
    recs, sim = run(cfg)
    pop, sizes = sim.fed.population, sim.train_clients.sizes(np.arange(20))
    secs = 3.0 * sizes * 2 * pop.compute_ms_per_sample / 1000.0  # factor x samples x E x ms
    assert sum(len(r.dropped) for r in recs) > 0
    for r in recs:
        assert r.extra["wasted_device_seconds"] == pytest.approx(secs[r.dropped].sum())
        assert r.extra["device_seconds"] == pytest.approx(secs[r.selected].sum())


def test_sageflow_groups_stale_rows_under_fedbuff(make_config: MakeConfig) -> None:
    """Sageflow's staleness groups work on asynchronous steps: stale rows are kept with reason
    "stale" (E_th above ln 10 keeps every finite row)."""
    recs, _ = run(
        make_config(
            "sf",
            num_clients=20,
            clients_per_round=6,
            rounds=6,
            round_policy="fedbuff",
            policy_params={"k": 2},
            defense="sageflow",
            defense_params={"entropy_threshold": 2.5},
            public_fraction=0.1,
        )
    )
    reasons = [v["reason"] for r in recs for v in r.verdicts]
    stale = sum(len(r.stale) for r in recs)
    assert stale > 0 and reasons.count("stale") == stale
    assert all(v["kept"] for r in recs for v in r.verdicts)


def test_simulations_sharing_a_federation_start_from_its_initial_model(
    make_config: MakeConfig,
) -> None:
    """The straggler study runs every policy on one federation: a run must not start from the
    model an earlier run left in the federation's template module."""
    from simulator.run.federation import build_federation

    cfg = make_config("shared", rounds=2)
    fed = build_federation(cfg)
    first = Simulation(cfg, federation=fed)
    try:
        a = [r.accuracy for r in first.run()]
    finally:
        first.close()
    second = Simulation(cfg, federation=fed)
    try:
        assert torch.equal(second.global_flat, fed.initial)
        assert [r.accuracy for r in second.run()] == a
    finally:
        second.close()
