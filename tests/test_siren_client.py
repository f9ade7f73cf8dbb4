"""Siren's client side: holdout split, alarm rule, start models (hand-checked)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from defenses.siren_client import SirenClient
from simulator.data.clients import PartitionData
from simulator.models import ModelSpec
from simulator.training import FlatLayout, LocalSpec, train_clients


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
    sc = SirenClient(cc=0.04)
    previous = {0: np.zeros(2, np.float32), 1: np.ones(2, np.float32), 2: None, 3: None}

    def accuracy(flat: torch.Tensor | None, c: int) -> float:
        if flat is None:                   # the global model on each client's holdout
            return {0: 0.80, 1: 0.82}.get(c, 0.5)
        if float(flat.sum()) == 0.0:       # client 0's previous model
            return 0.9
        assert float(flat.sum()) == 2.0    # client 1's previous model
        return 0.85

    alarms = sc.alarms(np.array([0, 1, 2, 3]), {3}, previous, accuracy)
    # client 0: 0.9 > 0.80 + 0.04 * 0.9 = 0.836 -> alarm; client 1: 0.85 > 0.82 + 0.034 = 0.854?
    # no; client 2: first participation -> no; client 3: malicious -> always alarms
    assert alarms == {0: True, 1: False, 2: False, 3: True}
    starts = sc.start_models(alarms, {3}, previous)
    assert list(starts) == [0] and np.array_equal(starts[0], previous[0])
    # a client holding nothing out (accuracy None) cannot compare and does not alarm
    assert sc.alarms(np.array([0]), set(), previous, lambda f, c: None) == {0: False}


def test_invalid_parameters() -> None:
    with pytest.raises(ValueError, match="cc"):
        SirenClient(cc=1.5)
    with pytest.raises(ValueError, match="holdout"):
        SirenClient(holdout=0.0)


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
        out = train_clients(model, lay, g, x, y, idx, [1, 1], [3, 4], spec, vectorize=vec,
                            starts={0: start})
        # client 0 trained from ``start``; its update is still relative to the global model
        own = train_clients(model, lay, start, x, y, idx[:1], [1], [3], spec, vectorize=vec)
        torch.testing.assert_close(out.updates[0], start + own.updates[0] - g)
        plain = train_clients(model, lay, g, x, y, idx[1:], [1], [4], spec, vectorize=vec)
        torch.testing.assert_close(out.updates[1], plain.updates[0])
