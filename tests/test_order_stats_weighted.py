"""The sample-weighted median and trimmed mean without sorting (defenses/order_stats.py): hand
vectors, agreement with the sorted references of defenses/median.py and defenses/trimmedmean.py
(ties, copies, exact half weights), and the rules taking them at cohort scale."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from test_order_stats import tie_rich_rows

import defenses.order_stats as order_stats
from defenses import DefenseContext, UpdateBatch, make_defense
from defenses.median import weighted_median
from defenses.order_stats import column_weighted_median, column_weighted_trimmed_mean
from defenses.trimmedmean import weighted_trimmed_mean

#   column 0: 3, -1, 7, 2, -5 with weights 1, 2, 1, 1, 3 (total 8): sorted -5 (3), -1 (2),
#     2 (1), 3 (1), 7 (1): cumulative 3, 5 -> median -1; trim 1 drops -5 and 7:
#     (2 * -1 + 2 + 3) / 4 = 0.75
#   column 1: 1.5 five times -> 1.5 both
#   column 2: -0.25, 4, 4, -0.25, 9: sorted -0.25 (w 1, row 0), -0.25 (w 1, row 3), 4 (w 2,
#     row 1), 4 (w 1, row 2), 9 (w 3): cumulative 1, 2, 4 = half -> (4 + 4) / 2 = 4; trim 1
#     drops row 0's -0.25 and 9: (-0.25 + 2 * 4 + 4) / 4 = 2.9375
X = torch.tensor(
    [[3.0, 1.5, -0.25], [-1.0, 1.5, 4.0], [7.0, 1.5, 4.0], [2.0, 1.5, -0.25], [-5.0, 1.5, 9.0]]
)
W = np.array([1, 2, 1, 1, 3])


def test_hand_vectors() -> None:
    assert column_weighted_median(X, W).tolist() == [-1.0, 1.5, 4.0]
    assert column_weighted_trimmed_mean(X, W, 1).tolist() == [0.75, 1.5, 2.9375]
    # exact half at the end of a value: column 0 with weights 3, 1, 1, 1, 2 (total 8): sorted
    # -5 (2), -1 (1), 2 (1), 3 (3), 7 (1): cumulative 2, 3, 4 = half at 2 -> (2 + 3) / 2
    assert column_weighted_median(X, np.array([3, 1, 1, 1, 2])).tolist()[0] == 2.5
    # all weights 1: the ordinary median and trimmed mean
    ones = np.ones(5, np.int64)
    assert column_weighted_median(X, ones).tolist() == [2.0, 1.5, 4.0]
    assert column_weighted_trimmed_mean(X, ones, 1).tolist() == pytest.approx(
        [4 / 3, 1.5, 7.75 / 3], rel=1e-15
    )
    with pytest.raises(ValueError, match="weights must be 5 positive integers"):
        column_weighted_median(X, np.array([1, 2, 0, 1, 1]))
    with pytest.raises(ValueError, match="weights must be 5 positive integers"):
        column_weighted_median(X, np.array([1.0, 2, 1, 1, 1]))
    with pytest.raises(ValueError, match="needs 0 <= 2k < n"):
        column_weighted_trimmed_mean(X, W, 3)


@pytest.mark.parametrize("n", [1, 2, 7, 60, 61])
def test_agrees_with_the_sorted_references(n: int) -> None:
    x = tie_rich_rows(n)
    w = np.random.default_rng(n).integers(1, 6, size=n)
    w[: n // 2] = 2  # even weights make exact halves likely
    assert torch.equal(column_weighted_median(x, w), weighted_median(x, w))  # bit for bit
    for k in sorted({0, (n - 1) // 2, n // 4}):
        torch.testing.assert_close(
            column_weighted_trimmed_mean(x, w, k),
            weighted_trimmed_mean(x, w, k),
            rtol=1e-14,
            atol=1e-300,
        )


@pytest.mark.parametrize("name", ["median", "trimmedmean"])
def test_weighted_rules_take_the_kernels_at_cohort_scale(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    g = torch.Generator().manual_seed(11)
    x = torch.round(torch.randn(25, 80, generator=g) * 4) / 4  # ties across the cuts
    m = np.random.default_rng(3).integers(1, 9, size=25)
    batch = UpdateBatch(x, np.arange(25), m, np.zeros(25, np.int64))
    ctx = DefenseContext(round=0, global_flat=torch.zeros(80))
    params = {"f": 3} if name == "trimmedmean" else {}
    rule = make_defense(name, weighting="samples", **params)
    small = rule(batch, ctx)
    calls: list[int] = []
    real = order_stats._stats
    monkeypatch.setattr(order_stats, "COLUMN_WORK", 25 * 80)
    monkeypatch.setattr(order_stats, "_stats", lambda *a: calls.append(1) or real(*a))
    big = rule(batch, ctx)
    assert calls == [1]
    torch.testing.assert_close(big.delta, small.delta, rtol=1e-6, atol=0)
    np.testing.assert_allclose(
        [v.score for v in big.verdicts], [v.score for v in small.verdicts], rtol=1e-12
    )
