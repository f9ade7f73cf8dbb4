"""FedBuff and FedAsync through the engine, one server step recomputed by hand.

A tiny run (digits, logistic regression: 650 parameters, FedAvg, ``--server-lr 1``) records the
raw rows as the clients returned them (a round callback's ``on_collect``) and the global model
every step started from. One step whose rows have different staleness is then recomputed from
those rows and the policy's published formula (the papers', written out here, not imported from
the policy), and must equal the engine's new global model. Without the staleness adjustment
(``simulator/round/aggregate.py``) both go red.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest
import torch

from simulator.config.sections import Config
from simulator.round.engine import Simulation
from simulator.round.plan import RoundPlan
from simulator.round.types import InFlight, RoundRecord

MakeConfig = Callable[..., Config]


class RawRows:
    """A round callback keeping every raw row by ``(client, base_round)`` with its sample
    count, and the global model each step started from (the model its fresh rows are
    relative to). ``on_collect`` sees every row a step's clients return, those aggregated at
    once and those that stay in flight, before anything rewrites them."""

    def __init__(self) -> None:
        self.rows: dict[tuple[int, int], tuple[np.ndarray, int]] = {}
        self.start: dict[int, torch.Tensor] = {}
        self.records: dict[int, RoundRecord] = {}  # filled by run_steps

    def on_collect(self, sim: Simulation, plan: RoundPlan, returned: dict[int, InFlight]) -> None:
        self.start[plan.round] = sim.global_flat.clone()  # not yet stepped
        for f in returned.values():
            key = (f.arrival.client_id, f.arrival.base_round)
            assert key not in self.rows and key[1] == plan.round
            self.rows[key] = (np.array(f.row, np.float64, copy=True), f.num_samples)


def run_steps(cfg: Config) -> tuple[RawRows, dict[int, torch.Tensor]]:
    """Run ``cfg`` step by step; the captured rows and the global model after each step."""
    raw = RawRows()
    sim = Simulation(cfg, callbacks=[raw])
    after: dict[int, torch.Tensor] = {}
    try:
        for rnd in range(cfg.experiment.rounds):
            raw.records[rnd] = sim.run_round(rnd, 0.0)
            after[rnd] = sim.global_flat.clone()
        assert sim.space.size == 64 * 10 + 10 and sim.defense.name == "fedavg"
    finally:
        sim.close()
    return raw, after


def aggregated(rec: RoundRecord) -> list[tuple[int, int]]:
    """``(client, base_round)`` of the rows the step aggregated, as it recorded them."""
    assert rec.rows is not None
    return list(zip(rec.rows.client_ids.tolist(), rec.rows.base_rounds.tolist(), strict=True))


def test_fedbuff_step_by_hand(make_config: MakeConfig) -> None:
    """Nguyen et al. 2022 (Alg. 1) with the defense's sample weights: ``x_{t+1} = x_t +
    sum_i n_i w(s_i) u_i / sum_i n_i``, ``w(s) = 1 / sqrt(1 + s)``. Seed 1, k = 3, five in
    flight: step 3 aggregates rows of staleness 1, 2 and 0."""
    cfg = make_config(
        "fb",
        model="logreg",
        seed=1,
        num_clients=10,
        clients_per_round=5,
        rounds=4,
        round_policy="fedbuff",
        policy_params={"k": 3},
    )
    assert cfg.algorithm.server_lr == 1.0
    raw, after = run_steps(cfg)
    rnd = 3
    rec = raw.records[rnd]
    rows = aggregated(rec)
    staleness = [rnd - b for _, b in rows]
    assert sorted(staleness) == [0, 1, 2] and sorted(rec.extra["staleness"]) == [0, 1, 2]
    weight = {0: 1.0, 1: 0.70710678, 2: 0.57735027}  # 1/sqrt(1+s)
    assert all(weight[s] == pytest.approx(1 / math.sqrt(1 + s), abs=1e-8) for s in weight)
    num = np.zeros(650)
    total = 0
    for (c, b), s in zip(rows, staleness, strict=True):
        u, n = raw.rows[(c, b)]
        num += n * weight[s] * u
        total += n
    expect = raw.start[rnd].double() + torch.from_numpy(num / total)
    torch.testing.assert_close(after[rnd].double(), expect, rtol=0, atol=1e-6)
    # the recorded rows (what the defense and the ledger saw) are the scaled raw rows
    assert rec.rows is not None
    for i, ((c, b), s) in enumerate(zip(rows, staleness, strict=True)):
        torch.testing.assert_close(
            rec.rows.updates[i].double(),
            torch.from_numpy(weight[s] * raw.rows[(c, b)][0]),
            rtol=0,
            atol=1e-6,
        )
        assert int(rec.rows.num_samples[i]) == raw.rows[(c, b)][1]


def test_fedasync_step_by_hand(make_config: MakeConfig) -> None:
    """Xie et al. 2019 (Alg. 1, polynomial staleness): ``x_t = (1 - a_t) x_{t-1} + a_t x_new``,
    ``a_t = 0.6 (s + 1) ** -0.5``, ``x_new`` = the model the client trained from plus its row.
    Seed 0, four in flight: step 2 mixes client 2's update trained from step 0's model (s = 2,
    a_t = 0.6 / sqrt(3) = 0.3464)."""
    cfg = make_config(
        "fa",
        model="logreg",
        seed=0,
        num_clients=8,
        clients_per_round=4,
        rounds=3,
        round_policy="fedasync",
    )
    raw, after = run_steps(cfg)
    rnd = 2
    rec = raw.records[rnd]
    assert aggregated(rec) == [(2, 0)] and rec.extra["staleness"] == [2]
    alpha = 0.34641016
    assert alpha == pytest.approx(0.6 * (2 + 1) ** -0.5, abs=1e-8)
    u, _ = raw.rows[(2, 0)]
    x_new = raw.start[0].double() + torch.from_numpy(u)
    expect = (1 - alpha) * raw.start[rnd].double() + alpha * x_new
    torch.testing.assert_close(after[rnd].double(), expect, rtol=0, atol=1e-6)
    # the step moved the model: step 0's base is not step 2's (the drift term matters)
    assert (raw.start[rnd] - raw.start[0]).abs().max() > 1e-3
    # every step before it mixed one fresh or stale update the same way
    for r in (0, 1):
        ((c, b),) = aggregated(raw.records[r])
        a = 0.6 * (r - b + 1) ** -0.5
        want = (1 - a) * raw.start[r].double() + a * (
            raw.start[b].double() + torch.from_numpy(raw.rows[(c, b)][0])
        )
        torch.testing.assert_close(after[r].double(), want, rtol=0, atol=1e-6)


def test_capture_holds_every_row_once(make_config: MakeConfig) -> None:
    """Sanity of the capture: step 0 starts all four clients (concurrency = cohort), each
    returns its own nonzero row relative to step 0's model."""
    cfg = make_config(
        "cap",
        model="logreg",
        seed=0,
        num_clients=8,
        clients_per_round=4,
        rounds=1,
        round_policy="fedasync",
    )
    raw, _ = run_steps(cfg)
    assert sorted(raw.rows) == [(0, 0), (2, 0), (3, 0), (4, 0)]
    assert all(np.abs(u).max() > 0 for u, _ in raw.rows.values())
    assert not np.array_equal(raw.rows[(0, 0)][0], raw.rows[(2, 0)][0])
