"""The float32 screen of Krum and Multi-Krum (defenses/screen.py): its bound and its tiers (that
its selections are the exact path's: test_defense_fast.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from test_defense_fast import D2, ROWS, cases

import defenses.distances as distances
import defenses.screen as screen
from defenses.distances import exact_sq_dists
from defenses.krum import fast_krum_scores, krum_scores, select_lowest
from defenses.screen import screen_constant, screen_sq_dists, tight_scores_of


def test_screen_constant_by_hand() -> None:
    # gamma32(1024) = 1024 / (2^24 - 1024); 112 blocks of d = 114,314: gamma64(112) ~ 1.2e-14
    c, g = screen_constant(114_314)
    assert g == pytest.approx(1024 / (2**24 - 1024) + 2 * 112 * 2.0**-53, rel=1e-12)
    assert c == pytest.approx(1.01 * (g + 2 * 2.0**-24 + 4 * 2.0**-53), rel=1e-12)
    assert 6.1e-5 < g < 6.2e-5
    c_small, g_small = screen_constant(10)  # one block of 10 columns
    assert g_small == pytest.approx(10 / (2**24 - 10) + 2 * 2.0**-53, rel=1e-12)


def test_hand_checked_rows_on_the_screen() -> None:
    gd = screen_sq_dists(ROWS)  # small integers: every float32 product is exact
    assert gd.screened and gd.d2.tolist() == D2
    scores, bound = fast_krum_scores(gd, 2)  # two nearest: 1+25, 18+25, 25+85, 1+18
    assert scores.tolist() == [26, 43, 110, 19]
    assert (bound <= screen.SCREEN_RTOL * scores).all() and gd.exact_calls == 0


def test_screen_distances_within_their_bound() -> None:
    for x, _ in cases():
        gd = screen_sq_dists(x)
        exact = exact_sq_dists(x)
        r = gd.radius
        allowed = gd.c * (r[:, None] + r[None, :]) ** 2
        assert (np.abs(gd.d2 - exact) <= allowed + 1e-300).all()
    # the float64 path's constant would not cover the float32 product's error
    g = torch.Generator().manual_seed(7)
    x = torch.randn(30, 3000, generator=g) * 1e-2 + torch.randn(3000, generator=g)
    gd = screen_sq_dists(x)
    r = gd.radius
    err = np.abs(gd.d2 - exact_sq_dists(x)) / (r[:, None] + r[None, :]) ** 2
    assert err.max() > 1.01 * distances.gamma(3000 + 8) and err.max() <= gd.c


def test_tight_tier_decides_a_near_tie_without_the_exact_path() -> None:
    # 3 neighbours: row 0 scores 0 + 1 + 1 (+9e-14), row 1 (1 - 3e-7)^2 + 9e-14 + 1: row 1 wins
    # by 6e-7, inside the screen's bound (~1e-5 here), far outside float64's
    x = torch.tensor([[0.0, 0.0], [3e-7, 0.0], [1.0, 0.0], [-1.0, 0.0], [0.0, 1.0], [30.0, 30.0]])
    gd = screen_sq_dists(x)
    exact = krum_scores(exact_sq_dists(x), 3)
    scores, bound = fast_krum_scores(gd, 3)
    assert abs(exact[0] - exact[1]) < bound[0]  # the screen alone cannot order rows 0 and 1
    chosen = select_lowest(gd, scores, bound, np.arange(6), 3, 1)
    assert chosen.tolist() == [int(np.argmin(exact))]
    assert len(gd.tight) >= 2 and gd.exact_calls == 0  # decided by the float64 tier
    s, b = tight_scores_of(gd, np.array([0, 1]), np.ones(6, dtype=bool), 3)
    assert (np.abs(s - exact[[0, 1]]) <= b).all() and (b < 1e-12 * s).all()


def test_exact_tier_decides_true_ties_by_client_id() -> None:
    x = torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0], [0.0, -1.0], [9.0, 9.0]])
    gd = screen_sq_dists(x)
    scores, bound = fast_krum_scores(gd, 2)
    chosen = select_lowest(gd, scores, bound, np.array([4, 3, 2, 1, 0]), 2, 1)
    assert chosen.tolist() == [3] and len(gd.tight) >= 2 and gd.exact_calls >= 2
