"""Chunk runtime predictors: Parrot's linear fit by hand, MAPE by hand, the GBDT learning the
padding cost that a samples-only fit cannot see."""

from __future__ import annotations

import numpy as np
import pytest

from simulator.scheduler.predictor import (
    FEATURES,
    GBDTPredictor,
    LinearPredictor,
    features,
    mape,
)


def chunk(clients: int, max_steps: int, steps: int, samples: int) -> dict[str, int]:
    return {"clients": clients, "max_steps": max_steps, "steps": steps, "samples": samples}


def test_features_and_mape_by_hand() -> None:
    x = features([chunk(2, 5, 8, 80), chunk(1, 3, 3, 30)], flops=7.0, kind=1)
    assert x.tolist() == [[2, 5, 8, 80, 7, 1], [1, 3, 3, 30, 7, 1]]
    assert x.shape[1] == len(FEATURES)
    # |1.1 - 1| / 1 = 0.1 and |1.8 - 2| / 2 = 0.1
    assert mape(np.array([1.1, 1.8]), np.array([1.0, 2.0])) == pytest.approx(0.1)
    with pytest.raises(ValueError, match="measured > 0"):
        mape(np.array([1.0]), np.array([0.0]))


def test_linear_fit_is_parrots_samples_line() -> None:
    lin = LinearPredictor()
    lin.observe(features([chunk(1, 1, 1, s) for s in (10, 20, 30)]), np.array([1.0, 2.0, 3.0]))
    # seconds = 0 + 0.1 x samples, exactly
    assert lin.predict(features([chunk(9, 9, 9, 40)])) == pytest.approx([4.0])
    st = lin.state_dict()
    again = LinearPredictor()
    again.load_state_dict(st)
    assert again.predict(features([chunk(1, 1, 1, 50)])) == pytest.approx([5.0])
    with pytest.raises(ValueError, match="nothing observed"):
        LinearPredictor().predict(features([chunk(1, 1, 1, 1)]))


def padded_chunks(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Chunks whose time is the padded work clients x longest schedule (plus a fixed cost),
    not the samples: what a vmapped chunk costs."""
    rng = np.random.default_rng(seed)
    clients = rng.integers(1, 60, n)
    steps = [rng.integers(1, 80, c) for c in clients]
    rows = [
        chunk(int(c), int(s.max()), int(s.sum()), int(s.sum() * 10))
        for c, s in zip(clients, steps, strict=True)
    ]
    x = features(rows)
    secs = 0.01 + 2e-4 * x[:, 0] * x[:, 1]
    return x, secs


def test_gbdt_learns_the_padding_cost_better_than_the_samples_line() -> None:
    x, y = padded_chunks(600, 0)
    xt, yt = padded_chunks(200, 1)  # held-out chunks
    gbdt, lin = GBDTPredictor(seed=0), LinearPredictor()
    gbdt.observe(x, y)
    lin.observe(x, y)
    e_gbdt, e_lin = mape(gbdt.predict(xt), yt), mape(lin.predict(xt), yt)
    assert e_gbdt < 0.15 and e_gbdt < e_lin / 2
    again = GBDTPredictor(seed=0)  # deterministic for a seed
    again.load_state_dict(gbdt.state_dict())
    np.testing.assert_array_equal(again.predict(xt), gbdt.predict(xt))
