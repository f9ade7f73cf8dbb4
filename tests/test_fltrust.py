"""FLTrust on hand-checkable vectors, and through the engine."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest
import torch
from conftest import run_records

from defenses import DefenseContext, UpdateBatch, make_defense
from defenses.fltrust import fltrust
from simulator.config.sections import Config


def batch(rows: list[list[float]]) -> UpdateBatch:
    n = len(rows)
    return UpdateBatch(
        torch.tensor(rows), np.arange(n), np.ones(n, np.int64), np.zeros(n, np.int64)
    )


def test_trust_scores_and_rescaling_by_hand() -> None:
    g0 = torch.tensor([1.0, 0.0], dtype=torch.float64)  # ||g0|| = 1
    # row 0: same direction, norm 2 -> cos 1, rescaled to [1, 0]
    # row 1: 45 degrees, norm sqrt(2) -> cos 1/sqrt(2), rescaled to [1/sqrt2, 1/sqrt2]
    # row 2: opposite -> cos -1 -> trust 0 (rejected)
    res = fltrust(batch([[2.0, 0.0], [1.0, 1.0], [-5.0, 0.0]]), g0)
    t1 = 1 / math.sqrt(2)
    total = 1 + t1
    expected = (1 * np.array([1.0, 0.0]) + t1 * np.array([t1, t1])) / total
    np.testing.assert_allclose(res.delta.numpy(), expected, rtol=1e-6)
    assert [v.kept for v in res.verdicts] == [True, True, False]
    assert res.verdicts[2].reason == "zero-trust"
    assert [round(v.score, 6) for v in res.verdicts] == [1.0, round(t1, 6), 0.0]
    assert sum(v.weight for v in res.verdicts) == pytest.approx(1.0)


def test_sample_weighting_multiplies_trust_by_samples() -> None:
    # the rows of the test above with 1, 3 and 2 samples: shares 1*1 and 3*(1/sqrt2) over
    # 1 + 3/sqrt2; the distrusted row stays out whatever its samples
    g0 = torch.tensor([1.0, 0.0], dtype=torch.float64)
    b = UpdateBatch(
        torch.tensor([[2.0, 0.0], [1.0, 1.0], [-5.0, 0.0]]),
        np.arange(3),
        np.array([1, 3, 2]),
        np.zeros(3, np.int64),
    )
    res = fltrust(b, g0, weighting="samples")
    t1 = 1 / math.sqrt(2)
    total = 1 + 3 * t1
    expected = (1 * np.array([1.0, 0.0]) + 3 * t1 * np.array([t1, t1])) / total
    np.testing.assert_allclose(res.delta.numpy(), expected, rtol=1e-6)
    assert [v.weight for v in res.verdicts] == pytest.approx([1 / total, 3 * t1 / total, 0.0])
    assert [round(v.score, 6) for v in res.verdicts] == [1.0, round(t1, 6), 0.0]
    ctx = DefenseContext(0, torch.zeros(2), server_update=lambda: g0)
    uniform = make_defense("fltrust")(b, ctx)
    assert uniform.verdicts[1].weight == pytest.approx(t1 / (1 + t1))
    with pytest.raises(ValueError, match=r"weighting 'sample' invalid; valid: \['samples'"):
        make_defense("fltrust", weighting="sample")


def test_sign_trust_gives_every_aligned_row_full_trust() -> None:
    # cosines 1, 1/sqrt2, -1, 0 -> sign trust 1, 1, 0, 0 (a zero cosine is not trusted); the
    # rows rescaled to ||g0|| = 1 are [1, 0] and [t, t], t = 1/sqrt2, with 1 and 3 samples
    g0 = torch.tensor([1.0, 0.0], dtype=torch.float64)
    b = UpdateBatch(
        torch.tensor([[2.0, 0.0], [1.0, 1.0], [-5.0, 0.0], [0.0, 3.0]]),
        np.arange(4),
        np.array([1, 3, 2, 4]),
        np.zeros(4, np.int64),
    )
    t = 1 / math.sqrt(2)
    res = fltrust(b, g0, weighting="samples", trust_rule="sign")
    np.testing.assert_allclose(res.delta.numpy(), [(1 + 3 * t) / 4, 3 * t / 4], rtol=1e-6)
    assert [v.weight for v in res.verdicts] == pytest.approx([0.25, 0.75, 0.0, 0.0])
    assert [(v.kept, v.score) for v in res.verdicts] == [
        (True, 1.0),
        (True, 1.0),
        (False, 0.0),
        (False, 0.0),
    ]
    ctx = DefenseContext(0, torch.zeros(2), server_update=lambda: g0)
    uniform = make_defense("fltrust", trust="sign")(b, ctx)
    np.testing.assert_allclose(uniform.delta.numpy(), [(1 + t) / 2, t / 2], rtol=1e-6)
    with pytest.raises(
        ValueError, match=r"trust 'relu' invalid; valid: \['cosine', 'median', 'sign'\]"
    ):
        make_defense("fltrust", trust="relu")


def test_median_trust_caps_at_the_median_cosine() -> None:
    # cosines 1, 1/sqrt2, -1, 0, 0.5, 0.25, 0.6 -> median 0.5 -> trust 1, 1, 0, 0, 1, 0.5, 1;
    # each trusted row rescaled to ||g0|| = 1 (its unit vector), uniform shares over 4.5
    g0 = torch.tensor([1.0, 0.0], dtype=torch.float64)
    r3, r15, t = math.sqrt(3), math.sqrt(15), 1 / math.sqrt(2)
    rows = [[2.0, 0.0], [1.0, 1.0], [-5.0, 0.0], [0.0, 3.0], [1.0, r3], [1.0, r15], [0.6, 0.8]]
    res = fltrust(batch(rows), g0, trust_rule="median")
    assert [v.score for v in res.verdicts] == pytest.approx([1, 1, 0, 0, 1, 0.5, 1])
    units = np.array([[1, 0], [t, t], [0.5, r3 / 2], [0.25, r15 / 4], [0.6, 0.8]])
    expected = (np.array([1, 1, 1, 0.5, 1]) @ units) / 4.5
    np.testing.assert_allclose(res.delta.numpy(), expected, rtol=1e-6)
    assert [v.weight for v in res.verdicts] == pytest.approx(
        [1 / 4.5, 1 / 4.5, 0, 0, 1 / 4.5, 0.5 / 4.5, 1 / 4.5]
    )
    # a median cosine <= 0 leaves the sign rule: cosines 1, -1, -0.5 -> trust 1, 0, 0
    res = fltrust(batch([[3.0, 0.0], [-1.0, 0.0], [-1.0, r3]]), g0, trust_rule="median")
    assert [v.score for v in res.verdicts] == [1.0, 0.0, 0.0]


def test_all_distrusted_gives_zero_update() -> None:
    res = fltrust(batch([[-1.0, 0.0], [0.0, -2.0]]), torch.tensor([1.0, 1.0], dtype=torch.float64))
    assert torch.count_nonzero(res.delta) == 0 and not any(v.kept for v in res.verdicts)


def test_needs_root_set_and_valid_eps() -> None:
    d = make_defense("fltrust")
    with pytest.raises(ValueError, match="needs a server root set"):
        d(batch([[1.0, 0.0]]), DefenseContext(round=0, global_flat=torch.zeros(2)))
    with pytest.raises(ValueError, match="eps"):
        make_defense("fltrust", eps=0.0)


def test_fltrust_through_the_engine(make_config: Callable[..., Config]) -> None:
    cfg = make_config(
        defense="fltrust",
        public_fraction=0.07,
        rounds=3,
        attack="signflip",
        attack_fraction=0.3,
        attack_params={"scale": 4},
    )
    recs = run_records(cfg)
    # sign-flipped rows point away from the server's update: zero trust
    for r in recs:
        mal = set(r.extra["malicious"])
        assert mal and mal <= set(r.rejected)
    assert recs[-1].accuracy is not None
