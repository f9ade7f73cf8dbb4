"""Geometric median (defenses/geomed.py): hand-checked medians, and far outliers that hold less
than half the weight, which must leave the estimate within the other rows' spread."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import defenses.geomed as geomed
from defenses import DefenseContext, UpdateBatch, make_defense
from defenses.geomed import start_weights

CTX = DefenseContext(round=0, global_flat=torch.zeros(1))


def batch_of(
    rows: list[list[float]] | torch.Tensor, samples: list[int] | None = None
) -> UpdateBatch:
    x = torch.as_tensor(rows, dtype=torch.float32)
    n = len(x)
    return UpdateBatch(
        x, np.arange(n), np.array(samples or [1] * n, np.int64), np.zeros(n, np.int64)
    )


def geomed_of(
    rows: list[list[float]] | torch.Tensor, samples: list[int] | None = None, **params: float
) -> list[float]:
    return make_defense("geomed", **params)(batch_of(rows, samples), CTX).delta.tolist()


# ---------------------------------------------------------------- hand-checked medians


def test_collinear_points_give_the_median_on_their_line() -> None:
    # p + t e, t = -3, 0, 1, 4, 50 on a line: the median of t is 1, so the point is p + e
    p, e = np.array([1.0, 2.0, 3.0]), np.array([2.0, -1.0, 2.0]) / 3
    rows = [(p + t * e).tolist() for t in (-3.0, 0.0, 1.0, 4.0, 50.0)]
    assert geomed_of(rows) == pytest.approx((p + e).tolist(), abs=1e-6)


def test_equilateral_triangle_gives_its_centre() -> None:
    # (10,0), (12,0), (11,sqrt 3): symmetric, the three unit vectors to the vertices cancel at
    # the centre (11, sqrt(3)/3). The start (rows of norm <= the median norm: the first and
    # third) is their midpoint (10.5, sqrt(3)/2), so Weiszfeld must get there
    s3 = float(torch.tensor(math.sqrt(3.0), dtype=torch.float32))  # the row's float32 value
    assert geomed_of([[10.0, 0.0], [12.0, 0.0], [11.0, s3]], tol=1e-20) == pytest.approx(
        [11.0, s3 / 3], abs=1e-6
    )


def test_right_triangle_gives_its_fermat_point() -> None:
    # (0,0), (1,0), (0,1): every angle < 120 degrees, so the median is the Fermat point, where
    # each side subtends 120 degrees: (t, t) with 6t^2 - 6t + 1 = 0, t = (3 - sqrt 3) / 6,
    # not the centroid (1/3, 1/3) that the loop starts from
    t = (3 - math.sqrt(3.0)) / 6  # 0.21132...
    assert geomed_of([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0]], tol=1e-20) == pytest.approx(
        [t, t], abs=1e-7
    )


def test_start_on_a_row_that_is_not_the_median_is_left() -> None:
    # (-1,0), (1,0), (0,0), (0,3) with 10, 10, 10, 11 samples: the start (rows of norm <= the
    # weighted median norm 1) is the mean of the first three, the row (0,0). The other rows pull
    # there with 11/41 > its own 10/41 (Kuhn): not the median. The median (0, y) balances
    # 20 y / sqrt(1 + y^2) = 11 - 10, so y = 1/sqrt(399) = 0.05006. Smoothed steps from the row
    # would crawl away by factors of ~1.1 from nu = 1e-6 (still 0.04 short after the 100
    # steps); the loop starts from the step without the row instead (this close to a row,
    # Weiszfeld converges slowly: 4e-6 short after 100 steps)
    rows, samples = [[-1.0, 0.0], [1.0, 0.0], [0.0, 0.0], [0.0, 3.0]], [10, 10, 10, 11]
    y = 1 / math.sqrt(399.0)
    assert geomed_of(rows, samples, tol=1e-20) == pytest.approx([0.0, y], abs=1e-5)


def test_start_weights_hand_values() -> None:
    norms = torch.tensor([2.0, 0.0, 100.0, 1.0], dtype=torch.float64)
    # equal weights: sorted norms 0, 1, 2, 100 reach half the weight at 1: keep 0 and 1
    assert start_weights(norms, torch.full((4,), 0.25, dtype=torch.float64)).tolist() == [
        0.0,
        0.5,
        0.0,
        0.5,
    ]
    # weights 1, 1, 5, 1 (/8): cumulative 1, 2, 3 (norms 0, 1, 2) is under half, the norm 100
    # row reaches it: every row is kept
    a = torch.tensor([1.0, 1.0, 5.0, 1.0], dtype=torch.float64) / 8
    assert start_weights(norms, a).tolist() == a.tolist()


# ---------------------------------------------------------------- far outliers

P = np.array([0.5, -0.25, 2.0])  # the known point
H = 0.01  # half the side of the cube around it


def cube_and_outliers(magnitude: float) -> torch.Tensor:
    """``[10, 3]`` float32: the 8 corners ``P +- H`` of a cube, then 2 rows ``P + magnitude *
    (1, 1, 1)``. The outliers pull with their weight 0.2 along the diagonal; at the cube's far
    corner the other corners pull back with 0.1 (1 + 3/sqrt 3 + 3 * 2/sqrt 6) = 0.52, so the
    median lies inside the cube on its diagonal, whatever ``magnitude``."""
    signs = torch.tensor([[i >> 2 & 1, i >> 1 & 1, i & 1] for i in range(8)]) * 2.0 - 1.0
    corners = torch.from_numpy(P) + H * signs.double()
    return torch.cat([corners, torch.from_numpy(P + magnitude).expand(2, 3)]).float()


def gradient(x: torch.Tensor, v: torch.Tensor) -> float:
    """``||sum_k (v - u_k) / ||v - u_k|| || / n`` in float64: 0 at the geometric median."""
    diff = v.double() - x.double()
    return float((diff / diff.norm(dim=1, keepdim=True)).sum(0).norm()) / len(x)


@pytest.mark.parametrize("blocked", [False, True], ids=["copy", "blocked"])
@pytest.mark.parametrize("tol", [1e-10, 0.0])
@pytest.mark.parametrize("magnitude", [1e3, 1e10, 1e20, 3e38])
def test_far_outliers_leave_the_median_in_the_cube(
    magnitude: float, tol: float, blocked: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if blocked:  # the cohort-scale CPU loop (blocked passes over the float32 rows)
        monkeypatch.setattr(geomed, "BLOCKED_WORK", 1)
    x = cube_and_outliers(magnitude)
    res = make_defense("geomed", tol=tol)(batch_of(x), CTX)
    v = res.delta
    assert v.dtype == torch.float32 and bool(torch.isfinite(v).all())
    lo, hi = x[:8].min(dim=0).values, x[:8].max(dim=0).values
    assert bool(((v >= lo) & (v <= hi)).all()), f"{v.tolist()} outside the cube"
    assert v.tolist() == pytest.approx([v[0].item() - P[0] + p for p in P], abs=1e-6)  # diagonal
    assert gradient(x, v) < 1e-4  # converged: the unit vectors to the rows cancel
    # every client still has its verdict: kept, weight = score, the outliers' weights ~ 0
    assert [c.client_id for c in res.verdicts] == list(range(10))
    assert all(c.kept and c.weight == c.score for c in res.verdicts)
    weights = [c.weight for c in res.verdicts]
    assert sum(weights) == pytest.approx(1.0)
    assert max(weights[8:]) < 1e-4 and min(weights[:8]) > 0.05


@pytest.fixture
def passes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Grows by one on each pass of row distances of the float64-copy loop."""
    count: list[int] = []
    real = geomed.row_distances
    monkeypatch.setattr(geomed, "row_distances", lambda *a: count.append(1) or real(*a))
    return count


def test_outlier_distance_changes_neither_median_nor_work(passes: list[int]) -> None:
    # only the outliers' direction matters once they are far: 1e10 and 3e38 give the same
    # point, after as many passes of row distances (the start leaves the outliers out; from
    # the plain mean, 3e37 away, each step would only come back by a factor ~4: 80 passes)
    results, counts = [], []
    for magnitude in (1e10, 3e38):
        passes.clear()
        results.append(torch.tensor(geomed_of(cube_and_outliers(magnitude))))
        counts.append(len(passes))
    torch.testing.assert_close(results[0], results[1], rtol=0, atol=1e-7)
    assert counts[0] == counts[1] <= 15


def test_tol_zero_stops_once_the_estimate_stops_moving(passes: list[int]) -> None:
    # tol=0 asks for the median to float64 rounding: the loop stops on a move below 2^-40 of
    # the estimate's norm (27 passes here), not after max_iter = 100 steps
    geomed_of(cube_and_outliers(1e3), tol=0.0)
    assert len(passes) < 40
