"""Siren's client side: holdout split, alarm rules (the paper's margin and our McNemar test),
start models (hand-checked)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from defenses.siren_client import SirenClient, mcnemar_p
from simulator.data.clients import PartitionData
from simulator.training.flat import FlatLayout
from simulator.training.models import ModelSpec
from simulator.training.spec import LocalSpec
from simulator.training.stacked import train_clients


def test_split_holds_out_ten_percent_and_keeps_one_row() -> None:
    sc = SirenClient()
    full = [np.arange(20), np.arange(20, 21), np.arange(21, 26)]
    train = sc.split(PartitionData.from_lists(full), seed=0)
    ids = np.arange(3)
    # 10% of 20 = 2; a single row holds out nothing; 10% of 5 rounds to 0 but at least 1
    assert train.sizes(ids).tolist() == [18, 1, 4]
    assert sc.holdout is not None and sc.holdout.sizes(ids).tolist() == [2, 0, 1]
    for t, h, rows in zip(train.rows(ids).index, sc.holdout.rows(ids).index, full, strict=True):
        assert set(t).isdisjoint(h) and set(t) | set(h) == set(rows)


def test_alarm_rule_by_hand() -> None:
    sc = SirenClient(cc=0.04, alarm="paper")
    previous = {0: np.zeros(2, np.float32), 1: np.ones(2, np.float32), 2: None, 3: None}

    def accuracy(flat: torch.Tensor | None, c: int) -> float:
        if flat is None:  # the global model on each client's holdout
            return {0: 0.80, 1: 0.82}.get(c, 0.5)
        if float(flat.sum()) == 0.0:  # client 0's previous model
            return 0.9
        assert float(flat.sum()) == 2.0  # client 1's previous model
        return 0.85

    alarms = sc.alarms(np.array([0, 1, 2, 3]), {3}, previous, accuracy)
    # client 0: 0.9 > 0.80 + 0.04 * 0.9 = 0.836 -> alarm; client 1: 0.85 > 0.82 + 0.034 = 0.854?
    # no; client 2: first participation -> no; client 3: malicious -> always alarms
    assert alarms == {0: True, 1: False, 2: False, 3: True}
    starts = sc.start_models(alarms, {3}, previous)
    assert list(starts) == [0] and np.array_equal(starts[0], previous[0])
    # a client holding nothing out (accuracy None) cannot compare and does not alarm
    assert sc.alarms(np.array([0]), set(), previous, lambda f, c: None) == {0: False}


@pytest.mark.parametrize(
    ("b", "c", "p"),
    [
        (5, 0, 1 / 32),  # all 5 discordant samples favour the local model: 2^-5
        (4, 1, 6 / 32),  # P(B >= 4 | m = 5) = (C(5,4) + C(5,5)) / 2^5
        (7, 1, 9 / 256),  # (C(8,7) + C(8,8)) / 2^8
        (2, 3, 26 / 32),  # (10 + 10 + 5 + 1) / 32: the global model is better
        (0, 0, 1.0),  # no discordant pair: no evidence at all
    ],
)
def test_mcnemar_p_values_by_hand(b: int, c: int, p: float) -> None:
    assert mcnemar_p(b, c) == p


def test_mcnemar_alarm_by_hand() -> None:
    sc = SirenClient()  # alarm="mcnemar", alpha=0.05
    assert (sc.test, sc.alpha) == ("mcnemar", 0.05)
    glob = np.array([0] * 5 + [1] * 9, bool)  # 14 holdout samples: global 9/14
    five = np.ones(14, bool)  # right on all 5 the global misses
    four = np.array([0] + [1] * 13, bool)  # ... on 4 of them
    assert sc.alarm_paired(five, glob)  # p = 1/32 <= 0.05
    assert not sc.alarm_paired(four, glob)  # p = 1/16 > 0.05
    # the paper's margin alarms on far less: one sample (7 points) is above C_c = 4%
    one = np.array([0] * 4 + [1] * 10, bool)  # 10/14 vs 9/14
    assert SirenClient(alarm="paper").alarm(10 / 14, 9 / 14)
    assert not sc.alarm_paired(one, glob)  # p = 1/2
    assert not SirenClient(alpha=0.01).alarm_paired(five, glob)  # 1/32 > 0.01


def test_mcnemar_alarms_of_a_round() -> None:
    sc = SirenClient()
    glob = np.array([0] * 6 + [1] * 8, bool)
    previous = {0: np.zeros(2, np.float32), 1: np.ones(2, np.float32), 2: None}

    def correct(flat: torch.Tensor | None, c: int) -> np.ndarray | None:
        if c == 4:
            return None  # holds nothing out
        if flat is None:
            return glob
        # client 0: right on the 6 the global misses, wrong on 1 it gets: p = (7 + 1) / 2^7
        # = 1/16, no alarm; client 1: right on the 6, nothing lost: p = 1/64, alarm
        out = np.ones(14, bool)
        if float(flat.sum()) == 0.0:
            out[13] = False
        return out

    def never(flat: torch.Tensor | None, c: int) -> float:
        raise AssertionError("the McNemar alarm reads per-sample correctness only")

    previous[4] = np.zeros(2, np.float32)
    alarms = sc.alarms(np.array([0, 1, 2, 3, 4]), {3}, previous, never, correct)
    assert alarms == {0: False, 1: True, 2: False, 3: True, 4: False}
    with pytest.raises(ValueError, match="needs per-sample correctness"):
        sc.alarms(np.array([0]), set(), previous, never)


def test_invalid_parameters() -> None:
    with pytest.raises(ValueError, match="cc"):
        SirenClient(cc=1.5)
    with pytest.raises(ValueError, match="holdout"):
        SirenClient(holdout=0.0)
    with pytest.raises(ValueError, match=r"alarm 'exact' invalid; valid: \['mcnemar', 'paper'\]"):
        SirenClient(alarm="exact")
    with pytest.raises(ValueError, match="alpha 0.0 invalid"):
        SirenClient(alpha=0.0)


def test_training_from_an_own_start_model() -> None:
    torch.manual_seed(0)
    x, y = torch.randn(20, 4), torch.randint(0, 3, (20,))
    model = ModelSpec("logreg", (4,), 3).build(seed=0)
    lay = FlatLayout(model)
    g = lay.flatten(model)
    start = g + 0.5
    idx = [np.arange(0, 10), np.arange(10, 20)]
    spec = LocalSpec(0.1, 5)
    for vec in (True, False):
        out = train_clients(
            model, lay, g, x, y, idx, [1, 1], [3, 4], spec, vectorize=vec, starts={0: start}
        )
        # client 0 trained from ``start``; its update is still relative to the global model
        own = train_clients(model, lay, start, x, y, idx[:1], [1], [3], spec, vectorize=vec)
        torch.testing.assert_close(out.updates[0], start + own.updates[0] - g)
        plain = train_clients(model, lay, g, x, y, idx[1:], [1], [4], spec, vectorize=vec)
        torch.testing.assert_close(out.updates[1], plain.updates[0])


def test_per_sample_correctness_matches_accuracy(tmp_path: Path) -> None:
    from simulator.round.engine import Simulation
    from tests.conftest import small_config

    sim = Simulation(small_config(tmp_path, defense="siren", public_fraction=0.06))
    try:
        x, y = sim.fed.test_x.numpy(), sim.fed.test_y.numpy()
        right = sim.server.correct_on(sim.global_flat, x, y, batch=64)  # several batches
        assert right.dtype == bool and right.shape == (len(y),) and 0 < right.sum() < len(y)
        assert right.mean() == sim.server.accuracy_on(sim.global_flat, x, y)
        assert sim.server.correct_on(sim.global_flat, x[:0], y[:0]).shape == (0,)
    finally:
        sim.close()
