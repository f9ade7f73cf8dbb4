"""Tests for Sageflow (defenses/sageflow.py): hand-checked aggregates on a stub public-set scorer,
the properties every defense has (row order, identical rows, planted outlier), and one run."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from defense_stubs import batch_of, ctx_of, fixed_scorer

from defenses import DEFENSES, DefenseContext, UpdateBatch, make_defense
from defenses.sageflow import sageflow_gamma

ROWS = [[1.0, 0.0], [0.0, 1.0], [2.0, 2.0]]
M = [1, 1, 2]


def test_fresh_rows_loss_weighted_mean() -> None:
    # m / l = [1, 0.5, 2] / 3.5 -> (1*[1,0] + 0.5*[0,1] + 2*[2,2]) / 3.5 = [5, 4.5] / 3.5
    g = [1.0, -1.0]
    models = [[2.0, -1.0], [1.0, 0.0], [3.0, 1.0]]  # global + update
    ctx = ctx_of(fixed_scorer([0.1, 0.2, 0.3], [1.0, 2.0, 1.0], expect=models), 0, {0: g})
    res = make_defense("sageflow")(batch_of(ROWS, M), ctx)
    assert res.delta.tolist() == pytest.approx([5 / 3.5, 4.5 / 3.5])
    assert [(v.kept, v.reason) for v in res.verdicts] == [(True, "")] * 3
    assert [v.weight for v in res.verdicts] == pytest.approx([2 / 7, 1 / 7, 4 / 7])
    assert [v.score for v in res.verdicts] == pytest.approx([0.1, 0.2, 0.3])
    # delta=0: plain sample weights [1, 1, 2] / 4; delta=2: [1, 0.25, 2] / 3.25
    res = make_defense("sageflow", delta=0)(batch_of(ROWS, M), ctx)
    assert res.delta.tolist() == pytest.approx([5 / 4, 5 / 4])
    res = make_defense("sageflow", delta=2.0)(batch_of(ROWS, M), ctx)
    assert res.delta.tolist() == pytest.approx([5 / 3.25, 4.25 / 3.25])


def test_high_entropy_row_rejected() -> None:
    ctx = ctx_of(fixed_scorer([0.1, 1.5, 0.3], [1.0, 2.0, 1.0]))
    res = make_defense("sageflow")(batch_of(ROWS, M), ctx)
    assert res.delta.tolist() == pytest.approx([5 / 3, 4 / 3])  # rows 0, 2: weights 1, 2
    assert [(v.kept, v.weight, v.reason) for v in res.verdicts] == [
        (True, pytest.approx(1 / 3), ""),
        (False, 0.0, "entropy>=threshold"),
        (True, pytest.approx(2 / 3), ""),
    ]
    assert res.verdicts[1].score == 1.5
    # the threshold is strict (E == E_th is rejected); a backdoor setting of 2.0 keeps it
    ctx = ctx_of(fixed_scorer([0.1, 1.0, 0.3], [1.0, 2.0, 1.0]))
    assert not make_defense("sageflow")(batch_of(ROWS, M), ctx).verdicts[1].kept
    assert make_defense("sageflow", entropy_threshold=2.0)(batch_of(ROWS, M), ctx).verdicts[1].kept


def test_non_finite_scores_rejected() -> None:
    ctx = ctx_of(fixed_scorer([0.1, float("nan"), 0.3], [1.0, 1.0, float("inf")]))
    res = make_defense("sageflow")(batch_of(ROWS, M), ctx)
    assert [(v.kept, v.reason) for v in res.verdicts] == [
        (True, ""),
        (False, "non-finite-score"),
        (False, "non-finite-score"),
    ]
    assert res.delta.tolist() == pytest.approx([1.0, 0.0])


STALE_ROWS = [[1.0, 0.0], [0.0, 1.0], [2.0, 2.0]]
STALE_TAUS = [5, 5, 4]
STALE_M = [2, 2, 4]
STALE_BASES = {5: [1.0, 1.0], 4: [0.0, 0.0]}
STALE_MODELS = [[2.0, 1.0], [1.0, 2.0], [2.0, 2.0]]  # base_model(tau) + update


def test_staleness_groups() -> None:
    # t=5: group 5 = rows 0, 1 (size 4), v5 = [1,1] + mean([1,0], [0,1]) = [1.5, 1.5];
    # group 4 = row 2 (size 4), v4 = [0,0] + [2,2]. alpha ∝ 4 * 1^-0.5, 4 * 2^-0.5, so
    # a = alpha5 = 1 / (1 + 2^-0.5) = 2 - sqrt(2); w_agg = 1.5a + 2(1-a) = 2 - 0.5a and
    # delta = w_agg - [1, 1] = 1 - 0.5a = sqrt(2) / 2 in both coordinates
    seen: list[torch.Tensor] = []
    ctx = ctx_of(fixed_scorer([0.1, 0.1, 0.1], [1.0, 1.0, 1.0], STALE_MODELS, seen), 5, STALE_BASES)
    res = make_defense("sageflow")(batch_of(STALE_ROWS, STALE_M, STALE_TAUS), ctx)
    assert len(seen) == 1  # one call, all rows together
    a = 2 - math.sqrt(2)
    assert res.delta.tolist() == pytest.approx([math.sqrt(2) / 2] * 2)
    assert [v.weight for v in res.verdicts] == pytest.approx([a / 2, a / 2, 1 - a])
    assert [(v.kept, v.reason) for v in res.verdicts] == [(True, ""), (True, ""), (True, "stale")]
    # lambda = 0: alpha ∝ group sizes only, 1/2 each -> w_agg = [1.75, 1.75]
    res = make_defense("sageflow", staleness_lambda=0)(
        batch_of(STALE_ROWS, STALE_M, STALE_TAUS), ctx
    )
    assert res.delta.tolist() == pytest.approx([0.75, 0.75])


def test_group_emptied_by_filter_is_dropped() -> None:
    # the stale row is rejected: only group 5 remains, w_agg = [1.5, 1.5]
    ctx = ctx_of(fixed_scorer([0.1, 0.1, 3.0], [1.0, 1.0, 1.0]), 5, STALE_BASES)
    res = make_defense("sageflow")(batch_of(STALE_ROWS, STALE_M, STALE_TAUS), ctx)
    assert res.delta.tolist() == pytest.approx([0.5, 0.5])
    assert [v.weight for v in res.verdicts] == pytest.approx([0.5, 0.5, 0.0])
    assert res.verdicts[2].reason == "entropy>=threshold"


def test_stale_row_is_scored_as_its_full_model() -> None:
    # the scorer sees base_model(tau) + update, not global + update
    seen: list[torch.Tensor] = []
    ctx = ctx_of(fixed_scorer([0.1], [1.0], seen=seen), 3, {3: [10.0, 10.0], 1: [-1.0, 2.0]})
    res = make_defense("sageflow")(batch_of([[0.5, 0.5]], [3], [1]), ctx)
    assert seen[0].tolist() == [[-0.5, 2.5]]
    # one kept stale group: w_agg = its model, delta = w_agg - global
    assert res.delta.tolist() == pytest.approx([-10.5, -7.5])
    assert res.verdicts[0].reason == "stale" and res.verdicts[0].weight == 1.0
    # a stale row needs base_model
    bare = DefenseContext(3, torch.zeros(2), score_models=fixed_scorer([0.1], [1.0]))
    with pytest.raises(ValueError, match="'sageflow': stale rows need ctx.base_model"):
        make_defense("sageflow")(batch_of([[0.5, 0.5]], [3], [1]), bare)


def test_gamma_mixing() -> None:
    ctx = ctx_of(fixed_scorer([0.1, 0.2, 0.3], [1.0, 2.0, 1.0]))
    res = make_defense("sageflow", gamma0=0.5)(batch_of(ROWS, M), ctx)
    assert res.delta.tolist() == pytest.approx([0.5 * 5 / 3.5, 0.5 * 4.5 / 3.5])
    assert sum(v.weight for v in res.verdicts) == pytest.approx(1.0)  # gamma not folded in
    ctx = ctx_of(fixed_scorer([0.1] * 3, [1.0] * 3, STALE_MODELS), 5, STALE_BASES)
    res = make_defense("sageflow", gamma0=0.5)(batch_of(STALE_ROWS, STALE_M, STALE_TAUS), ctx)
    assert res.delta.tolist() == pytest.approx([math.sqrt(2) / 4] * 2)


def test_gamma_schedule() -> None:
    assert [sageflow_gamma(0.8, 2, r) for r in range(5)] == [0.8, 0.8, 0.4, 0.4, 0.2]
    assert [sageflow_gamma(0.8, 0, r) for r in (0, 7, 100)] == [0.8, 0.8, 0.8]
    ctx = ctx_of(fixed_scorer([0.1, 0.2, 0.3], [1.0, 2.0, 1.0]), 4)
    res = make_defense("sageflow", gamma0=0.8, gamma_halving_rounds=2)(
        batch_of(ROWS, M, [4, 4, 4]), ctx
    )
    assert res.delta.tolist() == pytest.approx([0.2 * 5 / 3.5, 0.2 * 4.5 / 3.5])


def test_nothing_kept_zero_delta() -> None:
    ctx = ctx_of(fixed_scorer([1.0, 2.0, 5.0], [1.0, 1.0, 1.0]))
    res = make_defense("sageflow", gamma0=0.5)(batch_of(ROWS, M), ctx)
    assert res.delta.tolist() == [0.0, 0.0]
    assert [(v.kept, v.weight, v.reason) for v in res.verdicts] == [
        (False, 0.0, "entropy>=threshold")
    ] * 3


def test_needs_public_set() -> None:
    with pytest.raises(
        ValueError,
        match=r"^defense 'sageflow': needs a server public set "
        r"\(--public-fraction > 0\)$",
    ):
        make_defense("sageflow")(batch_of(ROWS, M), ctx_of(None))


# ---------------------------------------------------------------- properties (stub scorer)


def model_scorer(models: torch.Tensor) -> dict[str, np.ndarray]:
    """Entropy grows with the model's norm, loss with its first coordinate: a pure function of
    each row, so scores follow the rows through any permutation."""
    x = models.double().numpy()
    return {
        "accuracy": np.zeros(len(x)),
        "entropy": np.linalg.norm(x, axis=1) / 4,
        "loss": 0.5 + np.abs(x[:, 0]),
    }


def test_row_order_does_not_matter() -> None:
    g = np.random.default_rng(0)
    n, p = 9, 4
    b = UpdateBatch(
        torch.tensor(g.normal(size=(n, p)), dtype=torch.float32),
        np.arange(100, 100 + n),
        g.integers(1, 20, size=n),
        g.integers(3, 6, size=n),
    )
    bases = {r: torch.tensor(g.normal(size=p) * 0.3, dtype=torch.float32) for r in (3, 4, 5)}
    ctx = DefenseContext(5, bases[5], score_models=model_scorer, base_model=bases.__getitem__)
    perm = np.random.default_rng(1).permutation(n)
    d = make_defense("sageflow", entropy_threshold=0.45, delta=2.0, gamma0=0.7)
    a, c = d(b, ctx), d(b.subset(perm), ctx)
    torch.testing.assert_close(a.delta, c.delta, rtol=1e-6, atol=1e-7)
    assert [v.client_id for v in c.verdicts] == b.client_ids[perm].tolist()
    va = {v.client_id: v for v in a.verdicts}
    for w in c.verdicts:
        v = va[w.client_id]
        assert (v.kept, v.reason) == (w.kept, w.reason)
        assert v.weight == pytest.approx(w.weight, rel=1e-9) and v.score == w.score
    kept = [v for v in a.verdicts if v.kept]
    assert 0 < len(kept) < n and {v.reason for v in kept} >= {"", "stale"}
    assert sum(v.weight for v in kept) == pytest.approx(1.0)
    assert all(v.weight == 0.0 and v.reason for v in a.verdicts if not v.kept)


def test_identical_rows_return_that_row() -> None:
    u = torch.tensor([0.3, -0.2, 0.1, 0.05])
    n = 7
    b = UpdateBatch(u.repeat(n, 1), np.arange(n), np.arange(1, n + 1), np.zeros(n, np.int64))
    ctx = DefenseContext(
        0, torch.zeros(4), score_models=model_scorer, base_model=lambda r: torch.zeros(4)
    )
    torch.testing.assert_close(make_defense("sageflow")(b, ctx).delta, u, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("where", [0, 3, 6])
def test_planted_outlier_is_filtered(where: int) -> None:
    n, p = 7, 4
    rows = 1.0 + np.random.default_rng(where).uniform(-0.1, 0.1, size=(n, p))
    rows[where] = 1e6
    b = UpdateBatch(
        torch.tensor(rows, dtype=torch.float32),
        np.arange(n),
        np.ones(n, np.int64),
        np.zeros(n, np.int64),
    )
    ctx = DefenseContext(
        0, torch.zeros(p), score_models=model_scorer, base_model=lambda r: torch.zeros(p)
    )
    res = make_defense("sageflow")(b, ctx)
    assert ((res.delta >= 0.9) & (res.delta <= 1.1)).all(), res.delta
    assert [v.kept for v in res.verdicts] == [i != where for i in range(n)]


# ---------------------------------------------------------------- parameters and state


@pytest.mark.parametrize(
    ("params", "pattern"),
    [
        (
            {"entropy_threshold": 0.0},
            r"'sageflow': entropy_threshold 0.0 invalid; valid: finite "
            r"float > 0",
        ),
        ({"entropy_threshold": float("inf")}, r"'sageflow': entropy_threshold inf invalid"),
        ({"delta": -1.0}, r"'sageflow': delta -1.0 invalid; valid: finite float >= 0"),
        (
            {"staleness_lambda": -0.5},
            r"'sageflow': staleness_lambda -0.5 invalid; valid: finite "
            r"float >= 0",
        ),
        ({"gamma0": 0.0}, r"'sageflow': gamma0 0.0 invalid; valid: 0 < gamma0 <= 1"),
        ({"gamma0": 1.5}, r"'sageflow': gamma0 1.5 invalid"),
        ({"gamma0": True}, r"'sageflow': gamma0 True invalid"),
        (
            {"gamma_halving_rounds": -1},
            r"'sageflow': gamma_halving_rounds -1 invalid; valid: "
            r"integer >= 0",
        ),
        ({"gamma_halving_rounds": 2.5}, r"'sageflow': gamma_halving_rounds 2.5 invalid"),
        ({"eth": 1.0}, r"'sageflow': unknown parameter 'eth'"),
        (
            {"entropy_filter": "loss"},
            r"'sageflow': entropy_filter 'loss' invalid; valid: \['absolute', 'relative'\]",
        ),
        ({"entropy_margin": float("nan")}, r"'sageflow': entropy_margin nan invalid"),
        ({"entropy_margin": True}, r"'sageflow': entropy_margin True invalid"),
        ({"stale": "drop"}, r"'sageflow': stale 'drop' invalid; valid: \['models', 'updates'\]"),
    ],
)
def test_invalid_parameters(params: dict[str, Any], pattern: str) -> None:
    with pytest.raises(ValueError, match=pattern):
        make_defense("sageflow", **params)


def test_registered_and_stateless() -> None:
    d = make_defense("sageflow", entropy_threshold=2.0, delta=5.0)
    assert DEFENSES["sageflow"] is type(d) and not d.linear
    assert d.state_dict() == {}
    d.load_state_dict({})
    with pytest.raises(ValueError, match="'sageflow': unexpected state"):
        d.load_state_dict({"groups": []})


# ---------------------------------------------------------------- end to end


def test_simulation_smoke(tmp_path: Path) -> None:
    from tests.conftest import run_records, small_config

    cfg = small_config(
        tmp_path,
        defense="sageflow",
        public_fraction=0.05,
        round_policy="deadline_carryover",
        deadline_s=2.0,
        rounds=3,
        defense_params={"entropy_threshold": 2.5},
    )
    recs = run_records(cfg)
    assert len(recs) == 3
    verdicts = [v for r in recs for v in r.verdicts]
    assert verdicts and all(v["score"] is not None and v["score"] >= 0 for v in verdicts)
    assert any(v["kept"] for v in verdicts)
    assert isinstance(recs[-1].accuracy, float) and math.isfinite(recs[-1].accuracy)
