"""Tests for the classic robust aggregators: hand-checked aggregates, then properties that every
registered defense must have (row order, identical rows, planted outliers, loud preconditions)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
import torch

from defenses import DEFENSES, DefenseContext, UpdateBatch, make_defense
from defenses.base import PreconditionError

CTX = DefenseContext(round=0, global_flat=torch.zeros(1))


def batch_of(
    rows: list[list[float]], samples: list[int] | None = None, ids: list[int] | None = None
) -> UpdateBatch:
    n = len(rows)
    return UpdateBatch(
        updates=torch.tensor(rows, dtype=torch.float32),
        client_ids=np.array(ids if ids is not None else range(n), np.int64),
        num_samples=np.array(samples or [1] * n, np.int64),
        base_rounds=np.zeros(n, np.int64),
    )


def run(
    name: str, rows: list[list[float]], samples: list[int] | None = None, **params: Any
) -> tuple[list[float], list[tuple[bool, str]], list[float]]:
    res = make_defense(name, **params)(batch_of(rows, samples), CTX)
    return (
        res.delta.tolist(),
        [(v.kept, v.reason) for v in res.verdicts],
        [v.weight for v in res.verdicts],
    )


# ---------------------------------------------------------------- hand-checked aggregates

SCALARS = [[0.0], [1.0], [2.0], [4.0], [10.0]]
# Krum, f=1, n=5: each score sums the n-f-2 = 2 smallest squared distances to the others
#   0: {1, 4, 16, 100} -> 1+4 = 5      1: {1, 1, 9, 81} -> 2      2: {4, 1, 4, 64} -> 5
#   4: {16, 9, 4, 36} -> 13            10: {100, 81, 64, 36} -> 100


def test_krum_picks_lowest_score() -> None:
    res = make_defense("krum", f=1)(batch_of(SCALARS), CTX)
    assert res.delta.tolist() == [1.0]
    assert [v.score for v in res.verdicts] == [5.0, 2.0, 5.0, 13.0, 100.0]
    assert [(v.kept, v.weight, v.reason) for v in res.verdicts] == [
        (False, 0.0, "krum-excluded"),
        (True, 1.0, ""),
        (False, 0.0, "krum-excluded"),
        (False, 0.0, "krum-excluded"),
        (False, 0.0, "krum-excluded"),
    ]


def test_multikrum_averages_m_lowest() -> None:
    delta, kept, weights = run("multikrum", SCALARS, f=1, m=3)  # scores 5, 2, 5 -> rows 0, 1, 2
    assert delta == [1.0] and [k for k, _ in kept] == [True, True, True, False, False]
    assert weights == pytest.approx([1 / 3] * 3 + [0, 0])
    delta, kept, _ = run("multikrum", SCALARS, f=1)  # m = n - f = 4: 0, 1, 2, 4
    assert delta == [1.75] and kept[4] == (False, "krum-excluded")


def test_krum_ties_broken_by_client_id() -> None:
    # 2-d, f=1, n=5: the four unit-square corners all score 1 + 1 = 2 (two neighbours at
    # distance 1); (5, 5) scores 41 + 50. Among the tied corners the smallest id, 3, wins.
    rows = [[5.0, 5.0], [0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]
    b = batch_of(rows, ids=[9, 7, 3, 8, 4])
    assert make_defense("krum")(b, CTX).delta.tolist() == [1.0, 0.0]  # id 3 beats id 7


def test_median() -> None:
    assert run("median", [[1, 5], [2, 6], [100, -100]])[0] == [2.0, 5.0]
    assert run("median", [[1.0], [2.0], [3.0], [100.0]])[0] == [2.5]  # even n: middle two
    delta, kept, weights = run("median", [[3.0, -1.0]])
    assert delta == [3.0, -1.0] and kept == [(True, "coordinate-wise")] and weights == [1.0]


def test_median_scores_are_distances() -> None:
    res = make_defense("median")(batch_of([[0.0, 0.0], [3.0, 4.0], [-1.0, 0.0]]), CTX)
    assert res.delta.tolist() == [0.0, 0.0]
    assert [v.score for v in res.verdicts] == [0.0, 5.0, 1.0]


def test_trimmed_mean() -> None:
    five = [[1.0], [2.0], [3.0], [4.0], [100.0]]
    assert run("trimmedmean", five, f=1)[0] == [3.0]  # mean(2, 3, 4)
    assert run("trimmedmean", five, beta=0.2)[0] == [3.0]  # floor(0.2 * 5) = 1 per side
    assert run("trimmedmean", five, f=0)[0] == [22.0]  # asked for: the plain mean
    # floor(0.1 * 5) = 0 trims nothing: refused (until stop 57 a plain mean, 22, without a word)
    with pytest.raises(PreconditionError, match=r"needs floor\(beta\*n\) >= 1 \(n=5, beta=0.1"):
        run("trimmedmean", five, beta=0.1)
    assert run("trimmedmean", five, f=2)[0] == [3.0]  # the median
    # per coordinate: [-50, 1, 2, 3, 4] -> mean(1, 2, 3); [-4, -3, -2, -1, 50] -> mean(-3..-1)
    rows = [[1, -1], [2, -2], [3, -3], [-50, 50], [4, -4]]
    delta, kept, weights = run("trimmedmean", rows)  # default f=1
    assert delta == [2.0, -2.0] and all(k == (True, "coordinate-wise") for k in kept)
    assert weights == pytest.approx([0.2] * 5)


def test_geomed() -> None:
    delta = run("geomed", [[0.0, 0.0], [1.0, 1.0], [10.0, 10.0]])[0]
    assert delta == pytest.approx([1.0, 1.0], abs=1e-4)  # collinear: the middle point
    square = [[1.0, 0.0], [-1.0, 0.0], [0.0, 1.0], [0.0, -1.0]]
    assert run("geomed", square)[0] == pytest.approx([0.0, 0.0], abs=1e-6)
    # sample weights 1, 1, 5: the weight-5 point outweighs the other two together
    delta, kept, weights = run("geomed", [[0.0], [1.0], [10.0]], samples=[1, 1, 5])
    assert delta == pytest.approx([10.0], abs=1e-4)
    assert all(k for k, _ in kept) and sum(weights) == pytest.approx(1.0)
    assert weights[2] > 0.99


def test_normclip() -> None:
    # [3, 4] has norm 5 -> [0.6, 0.8]; mean with [0, 0.5] = [0.3, 0.65]
    res = make_defense("normclip", tau=1.0)(batch_of([[3.0, 4.0], [0.0, 0.5]]), CTX)
    assert res.delta.tolist() == pytest.approx([0.3, 0.65])
    assert [(v.kept, v.weight, v.score, v.reason) for v in res.verdicts] == [
        (True, 0.5, 5.0, "clipped"),
        (True, 0.5, 0.5, ""),
    ]
    # sample-weighted: (1 * [0.6, 0.8] + 3 * [0, 0.5]) / 4
    assert run("normclip", [[3.0, 4.0], [0.0, 0.5]], samples=[1, 3])[0] == pytest.approx(
        [0.15, 0.575]
    )


def test_centeredclip_and_state() -> None:
    d = make_defense("centeredclip", tau=1.0, n_iter=1)
    # center 0: clip [3, 4] -> [0.6, 0.8]; mean with [0, 0.5] and [0, -0.5] = [0.2, 0.8/3]
    res = d(batch_of([[3.0, 4.0], [0.0, 0.5], [0.0, -0.5]]), CTX)
    assert res.delta.tolist() == pytest.approx([0.2, 0.8 / 3])
    assert [v.reason for v in res.verdicts] == ["clipped", "", ""]
    state = d.state_dict()
    assert state["center"].tolist() == pytest.approx([0.2, 0.8 / 3])
    twin = make_defense("centeredclip", tau=1.0, n_iter=1)
    twin.load_state_dict(state)
    # round 2 from the center c: all rows at [10, 0] -> c + (u - c) / ||u - c||
    c = np.array([0.2, 0.8 / 3])
    z = np.array([10.0, 0.0]) - c
    want = c + z / np.linalg.norm(z)
    b2 = batch_of([[10.0, 0.0]] * 3)
    assert d(b2, CTX).delta.tolist() == pytest.approx(want.tolist(), abs=1e-6)
    assert twin(b2, CTX).delta.tolist() == pytest.approx(want.tolist(), abs=1e-6)
    fresh = make_defense("centeredclip")
    assert fresh.state_dict() == {"center": None}
    with pytest.raises(ValueError, match="centeredclip.*center"):
        d(batch_of([[1.0, 2.0, 3.0]]), CTX)  # P changed under a kept center


def test_bulyan() -> None:
    # n=7, f=1: theta = 5 rows chosen by repeated Krum, beta = 3 closest to their median.
    # r=7 (4 nearest): scores 30 15 10 10 15 30 big -> 2 (tie with 3, smaller id)
    # r=6 (3 nearest) over {0,1,3,4,5,100}: 26 14 9 11 21 -> 3
    # r=5 (2 nearest) over {0,1,4,5,100}: 17 10 10 17 -> 1 (tie with 4)
    # r=4 (1 nearest) over {0,4,5,100}: 16 1 1 -> 4 (tie with 5)
    # r=3 (1 nearest) over {0,5,100}: 25 25 -> 0.  Chosen {0,1,2,3,4}: median 2, closest 1,2,3
    rows = [[0.0], [1.0], [2.0], [3.0], [4.0], [5.0], [100.0]]
    delta, kept, weights = run("bulyan", rows, f=1)
    assert delta == [2.0]
    assert kept == [(True, "coordinate-wise")] * 5 + [(False, "bulyan-excluded")] * 2
    assert weights == pytest.approx([0.2] * 5 + [0, 0])


def test_bulyan_coordinate_wise_stage() -> None:
    # f=0: theta = beta = n, Bulyan is the plain mean
    assert run("bulyan", [[1.0, 2.0], [3.0, 6.0], [5.0, 1.0]], f=0)[0] == [3.0, 3.0]


# ---------------------------------------------------------------- properties of every defense

PARAMS: dict[str, dict[str, Any]] = {
    "krum": {"f": 1},
    "multikrum": {"f": 1},
    "trimmedmean": {"f": 1},
    "bulyan": {"f": 1},
    "normclip": {"tau": 1.0},
    "centeredclip": {"tau": 1.0},
}
NOT_ROBUST = {"fedavg", "normclip"}
# defenses that score models on the server's public set: the contexts below have none (they
# raise ValueError without ctx.score_models); tests/test_sageflow.py checks the same properties
# with a stub scorer, as does tests/test_siren.py for siren
NEEDS_PUBLIC = {"sageflow", "siren", "fltrust"}  # need a server root set
N, P = 7, 4


def random_batch(seed: int = 0) -> UpdateBatch:
    g = np.random.default_rng(seed)
    return UpdateBatch(
        torch.tensor(g.normal(size=(N, P)), dtype=torch.float32),
        np.arange(100, 100 + N),
        g.integers(1, 20, size=N),
        np.zeros(N, np.int64),
    )


@pytest.mark.parametrize("name", sorted(set(DEFENSES) - NEEDS_PUBLIC))
def test_row_order_does_not_matter(name: str) -> None:
    b = random_batch()
    ctx = DefenseContext(round=0, global_flat=torch.zeros(P))
    perm = np.random.default_rng(1).permutation(N)
    a = make_defense(name, **PARAMS.get(name, {}))(b, ctx)
    c = make_defense(name, **PARAMS.get(name, {}))(b.subset(perm), ctx)
    torch.testing.assert_close(a.delta, c.delta, rtol=1e-6, atol=1e-7)
    va = {v.client_id: v for v in a.verdicts}
    vc = {v.client_id: v for v in c.verdicts}
    assert [v.client_id for v in c.verdicts] == b.client_ids[perm].tolist()
    assert set(va) == set(vc)
    for cid, v in va.items():
        w = vc[cid]
        assert (v.kept, v.reason) == (w.kept, w.reason)
        assert v.weight == pytest.approx(w.weight, rel=1e-6)
        assert (math.isnan(v.score) and math.isnan(w.score)) or v.score == pytest.approx(
            w.score, rel=1e-6
        )
    assert sum(v.weight for v in a.verdicts if v.kept) == pytest.approx(1.0)
    assert all(v.weight == 0.0 and v.reason for v in a.verdicts if not v.kept)


@pytest.mark.parametrize("name", sorted(set(DEFENSES) - NEEDS_PUBLIC))
def test_identical_rows_return_that_row(name: str) -> None:
    u = torch.tensor([0.3, -0.2, 0.1, 0.05])
    b = UpdateBatch(u.repeat(N, 1), np.arange(N), np.arange(1, N + 1), np.zeros(N, np.int64))
    res = make_defense(name, **PARAMS.get(name, {}))(b, DefenseContext(0, torch.zeros(P)))
    torch.testing.assert_close(res.delta, u, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", sorted(set(DEFENSES) - NOT_ROBUST - NEEDS_PUBLIC))
@pytest.mark.parametrize("where", [0, 3, 6])
def test_planted_outlier_is_neutralized(name: str, where: int) -> None:
    g = np.random.default_rng(where)
    rows = 1.0 + g.uniform(-0.1, 0.1, size=(N, P))
    rows[where] = 1e6
    b = UpdateBatch(
        torch.tensor(rows, dtype=torch.float32),
        np.arange(N),
        np.ones(N, np.int64),
        np.zeros(N, np.int64),
    )
    res = make_defense(name, **PARAMS.get(name, {}))(b, DefenseContext(0, torch.zeros(P)))
    assert ((res.delta >= 0.5) & (res.delta <= 1.5)).all(), res.delta
    if name in ("krum", "multikrum", "bulyan"):
        assert not res.verdicts[where].kept


@pytest.mark.parametrize(
    ("name", "params", "n", "pattern"),
    [
        ("krum", {"f": 1}, 4, r"'krum': needs n > 2f \+ 2 \(n=4, f=1\)"),
        ("krum", {"f": 2}, 6, r"'krum': needs n > 2f \+ 2 \(n=6, f=2\)"),
        ("multikrum", {"f": 1}, 4, r"'multikrum': needs n > 2f \+ 2"),
        ("multikrum", {"f": 1, "m": 5}, 5, r"'multikrum': needs m <= n - f \(n=5, f=1, m=5\)"),
        ("bulyan", {"f": 1}, 6, r"'bulyan': needs n >= 4f \+ 3 \(n=6, f=1\)"),
        ("bulyan", {"f": 2}, 10, r"'bulyan': needs n >= 4f \+ 3 \(n=10, f=2\)"),
        ("trimmedmean", {"f": 2}, 4, r"'trimmedmean': needs n > 2f \(n=4, f=2\)"),
        ("trimmedmean", {"f": 1}, 2, r"'trimmedmean': needs n > 2f \(n=2, f=1\)"),
    ],
)
def test_preconditions_fail_loudly(name: str, params: dict[str, Any], n: int, pattern: str) -> None:
    d = make_defense(name, **params)
    with pytest.raises(ValueError, match=pattern):
        d(batch_of([[float(i)] for i in range(n)]), CTX)


def test_median_needs_a_row() -> None:
    empty = UpdateBatch(
        torch.zeros(0, 2), np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64)
    )
    with pytest.raises(ValueError, match=r"'median': needs n >= 1"):
        make_defense("median").aggregate(empty, CTX)


@pytest.mark.parametrize(
    ("name", "params", "pattern"),
    [
        ("krum", {"f": -1}, r"'krum': f -1 invalid; valid: integer >= 0"),
        ("krum", {"f": 1.5}, r"'krum': f 1.5 invalid"),
        ("krum", {"f": True}, r"'krum': f True invalid"),
        ("krum", {"m": 2}, r"'krum': unknown parameter 'm'"),
        ("multikrum", {"m": 0}, r"'multikrum': m 0 invalid; valid: integer >= 1"),
        ("bulyan", {"f": -2}, r"'bulyan': f -2 invalid"),
        ("median", {"f": 1}, r"'median': unknown parameter 'f'"),
        ("trimmedmean", {"f": -1}, r"'trimmedmean': f -1 invalid"),
        ("trimmedmean", {"beta": 0.5}, r"'trimmedmean': beta 0.5 invalid; valid: 0 <= beta < 0.5"),
        ("trimmedmean", {"beta": -0.1}, r"'trimmedmean': beta -0.1 invalid"),
        ("trimmedmean", {"f": 1, "beta": 0.1}, r"'trimmedmean': give f or beta, not both"),
        ("geomed", {"nu": 0.0}, r"'geomed': nu 0.0 invalid; valid: finite float > 0"),
        ("geomed", {"max_iter": 0}, r"'geomed': max_iter 0 invalid; valid: integer >= 1"),
        ("geomed", {"tol": -1e-3}, r"'geomed': tol -0.001 invalid; valid: finite float >= 0"),
        ("normclip", {"tau": 0}, r"'normclip': tau 0 invalid; valid: finite float > 0"),
        ("normclip", {"tau": float("nan")}, r"'normclip': tau nan invalid"),
        ("centeredclip", {"tau": -1.0}, r"'centeredclip': tau -1.0 invalid"),
        ("centeredclip", {"n_iter": 0}, r"'centeredclip': n_iter 0 invalid; valid: integer >= 1"),
    ],
)
def test_invalid_parameters(name: str, params: dict[str, Any], pattern: str) -> None:
    with pytest.raises(ValueError, match=pattern):
        make_defense(name, **params)


def test_registry_names_match_classes() -> None:
    assert {
        "krum",
        "multikrum",
        "median",
        "trimmedmean",
        "geomed",
        "normclip",
        "centeredclip",
        "bulyan",
    } <= set(DEFENSES)
    assert all(cls.name == name for name, cls in DEFENSES.items())


def test_multikrum_sample_weighting() -> None:
    # scores (1 nearest neighbour): 1, 1, 81 -> rows 0 and 1 kept; samples 1 and 3:
    # weighted (0*1 + 1*3) / 4 = 0.75, uniform 0.5
    b = UpdateBatch(
        torch.tensor([[0.0], [1.0], [10.0]]),
        np.arange(3),
        np.array([1, 3, 1]),
        np.zeros(3, np.int64),
    )
    res = make_defense("multikrum", f=0, m=2, weighting="samples")(b, CTX)
    assert res.delta.item() == 0.75
    assert [v.weight for v in res.verdicts] == [0.25, 0.75, 0.0]
    assert make_defense("multikrum", f=0, m=2)(b, CTX).delta.item() == 0.5
    with pytest.raises(ValueError, match=r"weighting 'mean' invalid; valid: \['samples'"):
        make_defense("multikrum", weighting="mean")


@pytest.mark.parametrize(
    ("rows", "samples", "expected"),
    [
        ([0.0, 1.0, 10.0], [1, 3, 1], 1.0),  # cumulative 1, 4, 5: half (2.5) reached at 1
        ([0.0, 1.0, 10.0], [3, 1, 1], 0.0),  # cumulative 3: reached at 0
        ([0.0, 2.0, 4.0], [2, 1, 1], 1.0),  # cumulative 2 = exactly half: mean of 0 and 2
        ([5.0, 1.0, 3.0, 7.0], [1, 1, 1, 1], 4.0),  # equal weights: the ordinary median
    ],
)
def test_weighted_median(rows: list[float], samples: list[int], expected: float) -> None:
    b = UpdateBatch(
        torch.tensor([[r] for r in rows]),
        np.arange(len(rows)),
        np.array(samples),
        np.zeros(len(rows), np.int64),
    )
    assert make_defense("median", weighting="samples")(b, CTX).delta.item() == expected


def test_weighted_trimmed_mean() -> None:
    # f=1 drops 0 and 10 (per coordinate); 1 (3 samples) and 2 (1 sample): (3 + 2) / 4 = 1.25;
    # second coordinate: values 4, 3, 2, 1 -> keep 3 (3 samples) and 2 (1): (9 + 2) / 4 = 2.75
    b = UpdateBatch(
        torch.tensor([[0.0, 4.0], [1.0, 3.0], [2.0, 2.0], [10.0, 1.0]]),
        np.arange(4),
        np.array([1, 3, 1, 1]),
        np.zeros(4, np.int64),
    )
    res = make_defense("trimmedmean", f=1, weighting="samples")(b, CTX)
    assert res.delta.tolist() == [1.25, 2.75]
    assert make_defense("trimmedmean", f=1)(b, CTX).delta.tolist() == [1.5, 2.5]


def test_centeredclip_sample_weighting() -> None:
    # center 0, tau 10 (nothing clipped), one iteration: v = sum_k w_k u_k
    # samples 1, 3: (1*2 + 3*6) / 4 = 5; uniform (2 + 6) / 2 = 4
    b = UpdateBatch(
        torch.tensor([[2.0], [6.0]]), np.arange(2), np.array([1, 3]), np.zeros(2, np.int64)
    )
    got = make_defense("centeredclip", tau=10.0, n_iter=1, weighting="samples")(b, CTX)
    assert got.delta.item() == 5.0
    assert make_defense("centeredclip", tau=10.0, n_iter=1)(b, CTX).delta.item() == 4.0
