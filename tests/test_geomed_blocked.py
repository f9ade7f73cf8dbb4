"""Geometric median at cohort scale on the CPU: the blocked passes of defenses/blocked.py and
the Weiszfeld loop on them (no float64 copy of the rows)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import defenses.geomed as geomed
from benchmarks.defense_cost_study.references import geomed_iterations
from defenses import DefenseContext, UpdateBatch, make_defense
from defenses.blocked import mean_pass
from defenses.geomed import weiszfeld, weiszfeld_blocked, weiszfeld_reference

X = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
W = torch.tensor([0.5, 0.25, 0.25], dtype=torch.float64)
#   z = 0.5*(1,2) + 0.25*(3,4) + 0.25*(5,6) = (2.5, 3.5)


@pytest.mark.parametrize("block", [1, 2, 512])
@pytest.mark.parametrize("threads", [1, 2])
def test_mean_pass_hand_vectors(block: int, threads: int) -> None:
    z, s = mean_pass(X, W, block=block, threads=threads)
    assert z.tolist() == [2.5, 3.5]
    assert s.tolist() == [4.5, 0.5, 12.5]  # ||x_i - z||^2: 1.5^2*2, 0.5^2*2, 2.5^2*2
    z, p = mean_pass(X, W, centre=torch.tensor([1.0, 1.0], dtype=torch.float64), block=block)
    assert z.tolist() == [2.5, 3.5]
    assert p.tolist() == [6.5, 14.5, 22.5]  # x_i . (1.5, 2.5)


def cloud(n: int = 40, d: int = 500) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(4)
    x = torch.randn(n, d, generator=g) + 2.0
    x[:5] *= 30
    a = torch.rand(n, generator=g, dtype=torch.float64) + 0.1
    return x, a / a.sum()


def test_blocked_loop_matches_the_copy_loop() -> None:
    x, a = cloud()
    v0, w0 = weiszfeld_reference(x.double(), a, 1e-6, 100, 1e-10)
    v, w = weiszfeld_blocked(x, a, 1e-6, 100, 1e-10, block=7, threads=1)
    torch.testing.assert_close(v, v0, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(w, w0, rtol=1e-12, atol=1e-15)
    v3, w3 = weiszfeld_blocked(x, a, 1e-6, 100, 1e-10, block=7, threads=3)
    assert torch.equal(v3, v) and torch.equal(w3, w)  # the thread count changes no bit


def test_blocked_loop_stops_where_the_copy_loop_stops() -> None:
    x, a = cloud()
    for cap in (1, 2, 3):  # a capped run is the same iterate in both loops
        v0, _ = weiszfeld(x.double(), a, 1e-6, cap, 0.0)
        v, _ = weiszfeld_blocked(x, a, 1e-6, cap, 0.0, block=64)
        torch.testing.assert_close(v, v0, rtol=1e-12, atol=1e-12)


def test_defense_takes_the_blocked_path_at_cohort_scale(monkeypatch: pytest.MonkeyPatch) -> None:
    x, _ = cloud(12, 30)
    batch = UpdateBatch(x, np.arange(12)[::-1].copy(), np.arange(1, 13), np.zeros(12, np.int64))
    ctx = DefenseContext(round=0, global_flat=torch.zeros(30))
    small = make_defense("geomed")(batch, ctx)
    calls = []
    real = geomed.weiszfeld_blocked
    monkeypatch.setattr(geomed, "BLOCKED_WORK", 12 * 30)
    monkeypatch.setattr(
        geomed, "weiszfeld_blocked", lambda *a, **k: calls.append(1) or real(*a, **k)
    )
    big = make_defense("geomed")(batch, ctx)
    assert calls == [1]
    torch.testing.assert_close(big.delta, small.delta, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose([v.weight for v in big.verdicts], [v.weight for v in small.verdicts])
    monkeypatch.setattr(geomed, "BLOCKED_WORK", 12 * 30 + 1)
    assert torch.equal(make_defense("geomed")(batch, ctx).delta, small.delta)


def test_benchmark_counts_blocked_iterations(monkeypatch: pytest.MonkeyPatch) -> None:
    x, _ = cloud()
    batch = UpdateBatch(x, np.arange(40), np.ones(40, np.int64), np.zeros(40, np.int64))
    copy_loop = geomed_iterations(batch)
    monkeypatch.setattr(geomed, "BLOCKED_WORK", 1)
    assert geomed_iterations(batch) == copy_loop > 1
