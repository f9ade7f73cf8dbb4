"""Coordinate-wise order statistics without sorting (defenses/order_stats.py) and the row
distances of defenses/blocked.py: hand vectors, ties and signed zeros, agreement with the
sorted path, and the rules taking them at cohort scale."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import defenses.distances as distances
import defenses.order_stats as order_stats
from defenses import DefenseContext, UpdateBatch, make_defense
from defenses.blocked import row_sq_dists
from defenses.bulyan import closest_to_median
from defenses.median import sort_columns
from defenses.order_stats import column_median, column_trimmed_mean, column_window_mean

#   column 0: 3, -1, 7, 2, -5 -> sorted -5, -1, 2, 3, 7: median 2, trim 1: (-1 + 2 + 3) / 3 = 4/3
#   column 1: 1.5 five times   -> median 1.5, trim 1: 1.5 (ties across both cuts)
#   column 2: -0.25, 4, 4, -0.25, 9 -> sorted -0.25, -0.25, 4, 4, 9: median 4, trim 1: 23/3 / 3
X = torch.tensor(
    [[3.0, 1.5, -0.25], [-1.0, 1.5, 4.0], [7.0, 1.5, 4.0], [2.0, 1.5, -0.25], [-5.0, 1.5, 9.0]]
)


def test_hand_vectors() -> None:
    assert column_median(X).tolist() == [2.0, 1.5, 4.0]
    assert column_trimmed_mean(X, 1).tolist() == pytest.approx([4 / 3, 1.5, 7.75 / 3], rel=1e-15)
    assert column_trimmed_mean(X, 0).tolist() == pytest.approx([1.2, 1.5, 3.3], rel=1e-15)
    # an even count averages the middle two: column 0 without its last row: -1, 2, 3, 7 -> 2.5
    assert column_median(X[:4]).tolist() == [2.5, 1.5, 1.875]
    with pytest.raises(ValueError, match="needs 0 <= 2k < n"):
        column_trimmed_mean(X, 3)
    with pytest.raises(TypeError, match="need float32 CPU rows, got torch.float64"):
        column_median(X.double())  # the keys are float32 bit patterns


def test_signed_values_and_zeros_keep_their_order() -> None:
    x = torch.tensor([[-0.0], [0.0], [-1e-30], [1e-30], [-3.0e38], [float("inf")], [-2.0]])
    # sorted: -3e38, -2, -1e-30, -0/0, 0/-0, 1e-30, inf -> median 0 (either zero)
    assert column_median(x).tolist() == [0.0]
    assert column_trimmed_mean(x, 2).tolist() == pytest.approx([-1e-30 / 3], rel=1e-12)


def reference(x: torch.Tensor, k: int | None) -> torch.Tensor:
    s = torch.from_numpy(np.sort(x.numpy(), axis=0)).double()
    n = len(s)
    return (s[(n - 1) // 2] + s[n // 2]) / 2 if k is None else s[k : n - k].mean(dim=0)


def tie_rich_rows(n: int) -> torch.Tensor:
    """``[n, 300]`` float32 rows over six decades, with many ties (columns 0-39) and copies of
    one row (columns 40-59, the first half of the rows); seeded by ``n``."""
    g = torch.Generator().manual_seed(n)
    x = torch.randn(n, 300, generator=g) * torch.logspace(-3, 3, 300)
    x[:, :40] = torch.round(x[:, :40])  # many ties
    x[: n // 2, 40:60] = x[0, 40:60].clone()  # copies of one row
    return x


@pytest.mark.parametrize("n", [1, 2, 7, 60, 61])
def test_agrees_with_the_sorted_path(n: int) -> None:
    x = tie_rich_rows(n)
    assert torch.equal(column_median(x), reference(x, None))  # the same values, bit for bit
    for k in sorted({0, (n - 1) // 2, n // 4}):
        torch.testing.assert_close(column_trimmed_mean(x, k), reference(x, k), rtol=1e-14, atol=0)


def test_row_distances_by_hand() -> None:
    z = torch.tensor([1.0, 1.5, 0.0], dtype=torch.float64)
    # row 0: 2^2 + 0 + 0.25^2 = 4.0625; row 4: 6^2 + 0 + 9^2 = 117
    d = row_sq_dists(X, z, block=2)
    assert d[[0, 4]].tolist() == [4.0625, 117.0]
    torch.testing.assert_close(d, ((X.double() - z) ** 2).sum(dim=1), rtol=1e-15, atol=0)


def test_window_hand_vectors() -> None:
    # rows 0, 1, 2, 4 of X; beta 2. Column 0: 3, -1, 7, -5 -> sorted -5, -1, 3, 7, median 1:
    # windows (-5, -1), (-1, 3), (3, 7): lo moves while med - s[lo] > s[lo + 2] - med:
    # 6 > 2 -> lo 1; 2 > 6 no: window (-1, 3), mean 1. Column 1: 1.5. Column 2: -0.25, 4, 4, 9,
    # median 4: 4.25 > 0 -> lo 1; 0 > 5 no: (4, 4), mean 4.
    rows = np.array([0, 1, 2, 4])
    assert column_window_mean(X, rows, 2).tolist() == [1.0, 1.5, 4.0]
    # a tie keeps the smaller values: column 0 of rows 1, 3 (-1, 2), beta 1, median 0.5
    assert column_window_mean(X, np.array([1, 3]), 1).tolist()[0] == -1.0
    assert column_window_mean(X, rows, 4).tolist() == [1.0, 1.5, 4.1875]  # 16.75 / 4
    with pytest.raises(ValueError, match="needs 1 <= beta <= rows"):
        column_window_mean(X, rows, 5)


@pytest.mark.parametrize("n", [3, 8, 61])
def test_window_agrees_with_closest_to_median(n: int) -> None:
    g = torch.Generator().manual_seed(n + 1)
    x = torch.randn(n + 5, 200, generator=g) * torch.logspace(-2, 2, 200)
    x[:, :50] = torch.round(x[:, :50] * 2) / 2  # ties, also across the window's ends
    rows = torch.randperm(n + 5, generator=g)[:n].numpy()
    s = sort_columns(x[torch.from_numpy(rows)])
    for beta in sorted({1, n // 2, n - 1, n}):
        torch.testing.assert_close(
            column_window_mean(x, rows, beta), closest_to_median(s, beta), rtol=1e-14, atol=0
        )


@pytest.mark.parametrize("name", ["median", "trimmedmean", "bulyan"])
def test_rules_take_the_kernels_at_cohort_scale(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    g = torch.Generator().manual_seed(9)
    x = torch.randn(25, 80, generator=g)
    batch = UpdateBatch(x, np.arange(25), np.ones(25, np.int64), np.zeros(25, np.int64))
    ctx = DefenseContext(round=0, global_flat=torch.zeros(80))
    params = {"f": 3} if name in ("trimmedmean", "bulyan") else {}
    monkeypatch.setattr(distances, "EXACT_WORK", 0)  # Bulyan's cohort-scale branch
    small = make_defense(name, **params)(batch, ctx)
    calls: list[int] = []
    real = order_stats._stats
    monkeypatch.setattr(order_stats, "COLUMN_WORK", 25 * 80)
    monkeypatch.setattr(order_stats, "_stats", lambda *a: calls.append(1) or real(*a))
    big = make_defense(name, **params)(batch, ctx)
    assert calls == [1]
    torch.testing.assert_close(big.delta, small.delta, rtol=1e-6, atol=0)
    np.testing.assert_allclose(
        [v.score for v in big.verdicts], [v.score for v in small.verdicts], rtol=1e-12
    )


def test_affine_pass_by_hand() -> None:
    from defenses.blocked import affine_pass

    c = torch.tensor([0.5, 0.25, 0.0, 0.0, 0.25], dtype=torch.float64)
    v = torch.ones(3, dtype=torch.float64)
    # c @ X = (1.5 - 0.25 - 1.25, 1.5, -0.125 + 1 + 2.25) = (0, 1.5, 3.125); + 0.5 v
    u, sq = affine_pass(X, c, v, 0.5, block=2)
    assert u.tolist() == [0.5, 2.0, 3.625]
    assert sq is not None and sq[0].item() == 2.5**2 + 0.5**2 + 3.875**2  # 21.515625
    torch.testing.assert_close(sq, ((X.double() - u) ** 2).sum(dim=1), rtol=1e-15, atol=0)
    assert affine_pass(X, c, v, 0.5, dists=False)[1] is None


@pytest.mark.parametrize("weighting", ["uniform", "samples"])
def test_centeredclip_takes_blocked_passes_at_cohort_scale(
    weighting: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    g = torch.Generator().manual_seed(11)
    ids = np.array([7, 3, 9, 1, 5, 2, 8, 0, 6, 4])
    ctx = DefenseContext(round=0, global_flat=torch.zeros(40))
    rounds = [torch.randn(10, 40, generator=g) * s for s in (1.0, 0.3)]  # the 2nd has a center
    rounds[0][2] *= 50  # clipped
    sizes = np.arange(1, 11)

    def run() -> list:
        rule = make_defense("centeredclip", tau=2.0, weighting=weighting)
        return [rule(UpdateBatch(x, ids, sizes, np.zeros(10, np.int64)), ctx) for x in rounds]

    small = run()
    monkeypatch.setattr(order_stats, "COLUMN_WORK", 10 * 40)
    big = run()
    for a, b in zip(big, small, strict=True):
        torch.testing.assert_close(a.delta, b.delta, rtol=1e-6, atol=1e-7)
        assert [v.reason for v in a.verdicts] == [v.reason for v in b.verdicts]
        np.testing.assert_allclose(
            [v.score for v in a.verdicts], [v.score for v in b.verdicts], rtol=1e-12
        )
    assert "clipped" in [v.reason for v in big[0].verdicts]


def test_normclip_takes_blocked_passes_at_cohort_scale(monkeypatch: pytest.MonkeyPatch) -> None:
    g = torch.Generator().manual_seed(12)
    x = torch.randn(10, 40, generator=g) * 0.5
    x[[2, 6]] *= 20  # clipped
    batch = UpdateBatch(
        x, np.array([7, 3, 9, 1, 5, 2, 8, 0, 6, 4]), np.arange(1, 11), np.zeros(10, np.int64)
    )
    ctx = DefenseContext(round=0, global_flat=torch.zeros(40))
    small = make_defense("normclip", tau=4.0)(batch, ctx)
    monkeypatch.setattr(order_stats, "COLUMN_WORK", 10 * 40)
    big = make_defense("normclip", tau=4.0)(batch, ctx)
    torch.testing.assert_close(big.delta, small.delta, rtol=1e-6, atol=1e-7)
    assert [v.reason for v in big.verdicts] == [v.reason for v in small.verdicts]
    assert [v.reason for v in big.verdicts].count("clipped") == 2
    np.testing.assert_allclose(
        [v.score for v in big.verdicts], [v.score for v in small.verdicts], rtol=1e-12
    )
