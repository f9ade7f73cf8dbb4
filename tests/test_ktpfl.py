"""KT-pFL by hand: the coefficient step of Eq. 7 on 3 clients (exact c after one step), the
simplex projection, the personalized targets from c and 3 prediction rows, the server update
(store rows, c kept for the same cohort, FedMD's uniform c), the client's distillation loss and
the bytes on the wire."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
import torch

from simulator.algorithms import ServerRound, WireInfo, make_algorithm
from simulator.algorithms.ktpfl import TARGET, KTpFL
from simulator.algorithms.ktpfl_coef import (
    coefficient_grad,
    coefficient_step,
    project_columns,
    targets,
)
from simulator.config.learning import AlgorithmConfig
from simulator.training.step import Step

# three clients, one public sample, two classes: client 0 is undecided, 1 leans to class 0,
# 2 to class 1
S = torch.tensor([[[0.5, 0.5]], [[0.8, 0.2]], [[0.2, 0.8]]], dtype=torch.float64)
THIRD = torch.full((3, 3), 1.0 / 3.0, dtype=torch.float64)
W = torch.full((3,), 1.0 / 3.0, dtype=torch.float64)


def ktpfl(**params: Any) -> KTpFL:
    alg = make_algorithm(AlgorithmConfig(algorithm="ktpfl", algorithm_params=params))
    assert isinstance(alg, KTpFL)
    return alg


def test_targets_by_hand() -> None:
    """Columns of c mix the rows: t_0 = .5 s_0 + .5 s_1, t_1 = .25 s_0 + .5 s_1 + .25 s_2,
    t_2 = s_2 with s_0 = (1, 0), s_1 = (0, 1), s_2 = (.5, .5)."""
    c = torch.tensor([[0.5, 0.25, 0.0], [0.5, 0.5, 0.0], [0.0, 0.25, 1.0]])
    s = torch.tensor([[[1.0, 0.0]], [[0.0, 1.0]], [[0.5, 0.5]]])
    want = torch.tensor([[[0.5, 0.5]], [[0.375, 0.625]], [[0.5, 0.5]]])
    torch.testing.assert_close(targets(c, s), want, rtol=0, atol=1e-7)


def test_gradient_by_hand_and_by_autograd() -> None:
    """At c = 1/3 every target is (.5, .5); with a = log(.5/.8) + 1 and b = log(.5/.2) + 1,
    dKL_n/dc[m, n] = s_m . (log t_n - log s_n + 1): column 0 is all 1, column 1 is
    (.5a + .5b, .8a + .2b, .2a + .8b), column 2 its mirror; times w_n = 1/3 (rho's term is
    zero at 1/N). Autograd of the objective agrees."""
    a, b = math.log(0.5 / 0.8) + 1, math.log(0.5 / 0.2) + 1
    g = torch.tensor(
        [
            [1.0, 0.5 * a + 0.5 * b, 0.5 * b + 0.5 * a],
            [1.0, 0.8 * a + 0.2 * b, 0.8 * b + 0.2 * a],
            [1.0, 0.2 * a + 0.8 * b, 0.2 * b + 0.8 * a],
        ],
        dtype=torch.float64,
    )
    got = coefficient_grad(THIRD, S, W, lam=1.0, rho=0.5)
    torch.testing.assert_close(got, g / 3.0, rtol=0, atol=1e-12)

    c = torch.tensor([[0.5, 0.1, 0.2], [0.3, 0.6, 0.2], [0.2, 0.3, 0.6]], dtype=torch.float64)
    c.requires_grad_(True)
    t = torch.einsum("mn,mxk->nxk", c, S)
    kl = (t * (t.log() - S.log())).sum((1, 2))  # M = 1
    w = torch.tensor([0.2, 0.3, 0.5], dtype=torch.float64)
    obj = 2.0 * (w * kl).sum() + 0.7 * ((c - 1.0 / 3.0) ** 2).sum()
    (auto,) = torch.autograd.grad(obj, c)
    torch.testing.assert_close(coefficient_grad(c.detach(), S, w, 2.0, 0.7), auto)


def test_projection_by_hand() -> None:
    """(.5, .2, .1) sums to .8: each entry moves up by .2/3. (1.2, -.5, .1): keeping 1.2 and
    .1 would need theta = (1.3 - 1) / 2 = .15 > .1, so only 1.2 stays: theta = .2, (1, 0, 0).
    A column on the simplex, (.2, .3, .5), stays."""
    v = torch.tensor([[0.5, 1.2, 0.2], [0.2, -0.5, 0.3], [0.1, 0.1, 0.5]], dtype=torch.float64)
    want = torch.tensor(
        [[0.5 + 0.2 / 3, 1.0, 0.2], [0.2 + 0.2 / 3, 0.0, 0.3], [0.1 + 0.2 / 3, 0.0, 0.5]],
        dtype=torch.float64,
    )
    torch.testing.assert_close(project_columns(v), want, rtol=0, atol=1e-12)


def test_one_coefficient_step_on_three_clients() -> None:
    """From c = 1/3 with lam = 1, rho = .5, eta_3 = 1: c - grad is (0, 0, 0) in column 0
    (projected back to 1/3 each) and 1/3 - g[:, 1] / 3 in column 1, whose three entries stay
    in the support: the projection adds (1 - sum) / 3. Column 2 mirrors column 1."""
    a, b = math.log(0.5 / 0.8) + 1, math.log(0.5 / 0.2) + 1
    col1 = np.array(
        [
            1 / 3 - (0.5 * a + 0.5 * b) / 3,
            1 / 3 - (0.8 * a + 0.2 * b) / 3,
            1 / 3 - (0.2 * a + 0.8 * b) / 3,
        ]
    )
    col1 += (1 - col1.sum()) / 3
    want = np.stack([np.full(3, 1 / 3), col1, col1[[0, 2, 1]]], axis=1)
    got = coefficient_step(THIRD, S, W, lam=1.0, rho=0.5, lr=1.0).numpy()
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)
    np.testing.assert_allclose(got.round(5)[:, 1], [0.33333, 0.47196, 0.19471], atol=1e-5)
    # client 1 leans like itself: it weighs itself most and client 2 (the other way) least


def test_c_favours_the_peer_that_shares_a_class() -> None:
    """Clients 0 and 1 both predict class 0, client 2 class 1: after one step each of 0 and 1
    gives the other more weight than client 2, and client 2 gives them less than itself."""
    s = torch.tensor([[[0.9, 0.1]], [[0.8, 0.2]], [[0.1, 0.9]]], dtype=torch.float64)
    c = coefficient_step(THIRD, s, W, lam=1.0, rho=0.5, lr=1.0)
    assert c[1, 0] > c[2, 0] and c[0, 1] > c[2, 1] and c[2, 2] > max(c[0, 2], c[1, 2])
    torch.testing.assert_close(c.sum(0), torch.ones(3, dtype=torch.float64))


class Store:
    """The store calls the server update makes (a dict of table -> {id: row})."""

    def __init__(self) -> None:
        self.rows: dict[str, dict[int, np.ndarray]] = {}

    def put(self, table: str, ids: np.ndarray, values: np.ndarray) -> None:
        for c, v in zip(ids.tolist(), values, strict=True):
            self.rows.setdefault(table, {})[c] = np.array(v)


def server_round(ids: list[int], rows: torch.Tensor, kept: list[bool], store: Store) -> Any:
    k = len(ids)
    return ServerRound(
        round=0,
        global_flat=torch.arange(5.0),
        delta=torch.zeros(rows.shape[1]),
        client_ids=np.array(ids),
        kept=np.array(kept),
        weights=np.full(k, 1.0 / k),
        extras={},
        server=ktpfl().init_server(torch.zeros(5), 5),
        num_clients=10,
        slices={"head.bias": slice(3, 5)},
        store=store,
        rows=rows,
    )


def test_server_update_writes_each_clients_target() -> None:
    """Rows of clients 4, 7, 9 are S flattened (one public sample, two classes); the server
    steps c from 1/3 (the cohort is new) and writes t_n = sum_m c[m, n] s_m for each; the
    global state is unchanged. A rejected row (client 5) is in no mix and gets no target."""
    store = Store()
    rows = torch.cat([S.reshape(3, 2), torch.tensor([[9.0, -9.0]], dtype=torch.float64)])
    r = server_round([4, 7, 9, 5], rows.float(), [True, True, True, False], store)
    alg = ktpfl()
    out = alg.server_update(r)
    assert torch.equal(out, r.global_flat)
    c = coefficient_step(THIRD, S.float().double(), W, 1.0, 0.5, 1.0)
    torch.testing.assert_close(r.server["c"], c)
    assert r.server["c_ids"].tolist() == [4, 7, 9]
    t = targets(c, S.float().double()).reshape(3, 2).float().numpy()
    assert sorted(store.rows[TARGET]) == [4, 7, 9]
    for i, cid in enumerate([4, 7, 9]):
        np.testing.assert_array_equal(store.rows[TARGET][cid], t[i])
    # the same cohort next round continues from this c; a different one restarts at 1/3
    r2 = server_round([4, 7, 9], S.reshape(3, 2).float(), [True] * 3, Store())
    r2.server.update(r.server)
    alg.server_update(r2)
    torch.testing.assert_close(
        r2.server["c"], coefficient_step(c, S.float().double(), W, 1, 0.5, 1)
    )
    r3 = server_round([1, 7, 9], S.reshape(3, 2).float(), [True] * 3, Store())
    r3.server.update(r.server)
    alg.server_update(r3)
    torch.testing.assert_close(r3.server["c"], c)


def test_fedmd_targets_are_the_cohort_mean() -> None:
    """coefficients=uniform: c stays 1/3 and every target is the mean row (.5, .5)."""
    store = Store()
    r = server_round([0, 1, 2], S.reshape(3, 2).float(), [True] * 3, store)
    ktpfl(coefficients="uniform").server_update(r)
    torch.testing.assert_close(r.server["c"], THIRD)
    for cid in (0, 1, 2):
        np.testing.assert_allclose(store.rows[TARGET][cid], [0.5, 0.5], atol=1e-7)


def step(logits: torch.Tensor, target: torch.Tensor, index: list[int], mask: list[float]) -> Any:
    b = logits.shape[0]
    return Step(
        {},
        torch.zeros(1),
        torch.zeros(b, 2),
        torch.zeros(b).long(),
        torch.tensor(mask),
        logits,
        logits,
        torch.tensor(0.0),
        torch.zeros(1),
        {},
        {TARGET: target.reshape(-1)},
        {},
        lambda p, x: None,
        {},
        True,
        torch.tensor(index),
    )


def test_distillation_loss_by_hand() -> None:
    """T = 2, logits (0, 2 log 3) give softmax(z / T) = (1/4, 3/4); the batch holds public rows
    2 and 0 (row 2 a padding row, masked). Target row 0 is (.5, .5): KL = .5 log(.5 / .25) +
    .5 log(.5 / .75) = .5 log(4/3); times lam = 2."""
    z = torch.tensor([[0.0, 2 * math.log(3.0)], [0.0, 2 * math.log(3.0)]])
    target = torch.tensor([[0.5, 0.5], [0.0, 0.0], [0.9, 0.1]])
    loss = ktpfl(temperature=2.0, lam=2.0).client_loss(step(z, target, [0, 2], [1.0, 0.0]))
    assert loss.item() == pytest.approx(2 * 0.5 * math.log(4 / 3), abs=1e-6)
    zero = ktpfl().client_loss(step(z, torch.zeros(3, 2), [0, 2], [1.0, 1.0]))
    assert zero.item() == 0.0  # no target yet: no distillation


def test_bytes_on_the_wire() -> None:
    """500 public samples x 10 classes of float32: 20,000 bytes up and down per client."""
    w = WireInfo(np.array([3, 8]), 1234, 10, lambda: np.zeros((2, 10)), {}, row_size=5000)
    up, down = ktpfl().wire_bytes(w)
    assert up.tolist() == [20000.0, 20000.0] and down.tolist() == [20000.0, 20000.0]
    with pytest.raises(ValueError, match="row_size"):
        ktpfl().wire_bytes(WireInfo(np.array([3]), 1234, 10, lambda: np.zeros((1, 10))))


def test_passes_follow_the_order() -> None:
    assert ktpfl(passes=2).public_passes() == (2, 0)
    assert ktpfl(passes=2, order="local_first").public_passes() == (0, 2)
    with pytest.raises(ValueError, match="order='sideways' invalid; must be str one of"):
        ktpfl(order="sideways")
