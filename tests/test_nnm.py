"""defenses/nnm.py: nearest-neighbour mixing before a robust rule (Allouah et al. 2023)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from defenses import DefenseContext, PreconditionError, UpdateBatch, make_defense
from defenses.distances import EXACT_WORK, exact_sq_dists, gram_sq_dists
from defenses.nnm import clip_scales, mixing_matrix, neighbourhoods, row_norms, sq_dists


def batch(rows: list[list[float]], samples: list[int] | None = None, ids=None) -> UpdateBatch:
    k = len(rows)
    return UpdateBatch(
        torch.tensor(rows, dtype=torch.float32),
        np.arange(k, dtype=np.int64) if ids is None else np.asarray(ids, np.int64),
        np.ones(k, np.int64) if samples is None else np.asarray(samples, np.int64),
        np.zeros(k, np.int64),
    )


def ctx() -> DefenseContext:
    return DefenseContext(0, torch.zeros(2), rng=np.random.default_rng(0))


ROWS_1D = [[0.0], [1.0], [2.0], [3.0], [100.0]]


def test_mixes_by_hand_in_one_dimension() -> None:
    # F = 1, 4 neighbours each: rows 0-3 mix to (0+1+2+3)/4 = 1.5; 100 mixes with 3, 2, 1:
    # (100+3+2+1)/4 = 26.5. The median of [1.5]*4 + [26.5] is 1.5 (without mixing: 2)
    assert make_defense("median", nnm=1)(batch(ROWS_1D), ctx()).delta.item() == 1.5
    assert make_defense("median")(batch(ROWS_1D), ctx()).delta.item() == 2.0
    # Krum: four mixed rows tie at 1.5; the smallest client id wins
    res = make_defense("krum", f=1, nnm=1)(batch(ROWS_1D), ctx())
    assert res.delta.item() == 1.5
    assert [v.kept for v in res.verdicts] == [True, False, False, False, False]
    # Multi-Krum keeps the four mixes of 1.5 and rejects the outlier's mix
    res = make_defense("multikrum", f=1, nnm=1)(batch(ROWS_1D), ctx())
    assert res.delta.item() == 1.5 and not res.verdicts[4].kept


def test_mixes_weigh_rows_by_samples() -> None:
    # F = 1, 2 neighbours: row 0 -> {0, 2}: (0*1 + 2*3)/4 = 1.5; row 2 -> {2, 0}: 1.5;
    # row 10 -> {10, 2}: (10*1 + 2*3)/4 = 4; median of [1.5, 1.5, 4] = 1.5
    b = batch([[0.0], [2.0], [10.0]], samples=[1, 3, 1])
    m = mixing_matrix(neighbourhoods(sq_dists(b.updates), b.client_ids, 2), b.num_samples)
    assert m.tolist() == [[0.25, 0.75, 0.0], [0.25, 0.75, 0.0], [0.0, 0.75, 0.25]]
    assert make_defense("median", nnm=1)(b, ctx()).delta.item() == 1.5


def test_a_row_leads_its_own_neighbourhood_and_ties_go_to_the_smaller_id() -> None:
    # rows 1 and 2 are copies: each is first in its own neighbourhood; row 0 is 1 away from
    # both and takes the smaller id (11) first
    d2 = exact_sq_dists(torch.tensor([[0.0], [1.0], [1.0]]))
    assert neighbourhoods(d2, np.array([10, 12, 11]), 3).tolist() == [
        [0, 2, 1],
        [1, 2, 0],
        [2, 1, 0],
    ]


def test_arrival_order_does_not_change_the_aggregate() -> None:
    rng = np.random.default_rng(4)
    rows = rng.normal(size=(9, 3)).round(2).tolist()
    perm = rng.permutation(9)
    a = make_defense("multikrum", f=2, nnm=2)(batch(rows), ctx())
    b = make_defense("multikrum", f=2, nnm=2)(
        batch([rows[i] for i in perm], ids=perm.tolist()), ctx()
    )
    assert torch.equal(a.delta, b.delta)
    assert {v.client_id: v.kept for v in a.verdicts} == {v.client_id: v.kept for v in b.verdicts}


def test_angle_ranks_by_direction_and_clips_the_longest_rows() -> None:
    # a short row aligned with the long ones, and a short row pointing the other way: by
    # distance row 2's nearest other row is row 3 (0.2 away), by angle it is row 0
    rows = [[10.0, 0.0], [10.0, 1.0], [0.1, 0.0], [-0.1, 0.0]]
    ids = np.arange(4)
    x = torch.tensor(rows)
    assert neighbourhoods(sq_dists(x), ids, 2)[2].tolist() == [2, 3]
    assert neighbourhoods(sq_dists(x, "angle"), ids, 2)[2].tolist() == [2, 0]
    # F = 1: rows longer than the 2nd largest norm (10) are clipped to it: only row 1
    scales = clip_scales(row_norms(x), 1)
    c = x.double() * torch.from_numpy(scales)[:, None]
    assert c[1].tolist() == pytest.approx([10 / math.sqrt(1.01), 1 / math.sqrt(1.01)])
    assert torch.equal(c[[0, 2, 3]], x[[0, 2, 3]].double())
    assert clip_scales(row_norms(x), 0).tolist() == [1.0, 1.0, 1.0, 1.0]


def test_angle_mix_by_hand() -> None:
    # F = 1: row 4 (100, 0) is clipped to the 2nd largest norm, |(2, 0.1)| = sqrt(4.01).
    # Row 0's 4 nearest by angle: itself, row 4 (0 deg), row 1 (2.9 deg), row 2 (90 deg):
    # ((1 + 2 + sqrt(4.01) + 0) / 4, (0 + 0.1 + 0 + 1) / 4)
    rows = [[1.0, 0.0], [2.0, 0.1], [0.0, 1.0], [-1.0, 0.0], [100.0, 0.0]]
    res = make_defense("krum", f=1, nnm=1, nnm_rank="angle")(batch(rows), ctx())
    assert res.delta.tolist() == pytest.approx([(3 + math.sqrt(4.01)) / 4, 0.275], rel=1e-6)
    # by distance, row 0 mixes with rows 1, 3, 2 instead: ((1 + 2 - 1 + 0)/4, 1.1/4)
    res = make_defense("krum", f=1, nnm=1)(batch(rows), ctx())
    assert res.delta.tolist() == pytest.approx([0.5, 0.275], rel=1e-6)


def test_angle_mixing_bounds_a_boosted_row() -> None:
    # one aligned row boosted 10^6 times (model replacement): after the clip no mix is longer
    # than the longest benign row, so the aggregate stays among the benign rows
    rows = [[1.0, 0.1], [1.1, 0.0], [0.9, -0.1], [1.0, 0.0], [1e6, 1e5]]
    res = make_defense("median", nnm=1, nnm_rank="angle")(batch(rows), ctx())
    assert float(res.delta.norm()) <= math.hypot(1.1, 0.0) + 1e-6


def test_the_gram_path_ranks_like_the_exact_path() -> None:
    # n^2 d above EXACT_WORK: the neighbourhoods come from the Gram product
    rng = np.random.default_rng(7)
    x = torch.from_numpy(rng.normal(size=(40, 12_000)).astype(np.float32))
    x[:5] *= 3.0
    assert 40 * 40 * 12_000 > EXACT_WORK
    ids = np.arange(40)
    fast = neighbourhoods(gram_sq_dists(x).d2, ids, 30)
    exact = neighbourhoods(exact_sq_dists(x), ids, 30)
    assert np.array_equal(np.sort(fast, axis=1), np.sort(exact, axis=1))
    assert np.array_equal(neighbourhoods(sq_dists(x), ids, 30), fast)
    # angles from the Gram distances and the norms, against unit rows on the exact path
    xd = x.double()
    unit = xd / xd.norm(dim=1, keepdim=True)
    angle = sq_dists(x, "angle")
    assert np.abs(angle - exact_sq_dists(unit)).max() < 1e-9
    assert np.array_equal(
        np.sort(neighbourhoods(angle, ids, 30), axis=1),
        np.sort(neighbourhoods(exact_sq_dists(unit), ids, 30), axis=1),
    )


def test_precondition_is_a_byzantine_minority() -> None:
    d = make_defense("median", nnm=2)
    assert d.rule_precondition(4) == "n > 2F for nearest-neighbour mixing (n=4, F=2)"
    assert d.rule_precondition(5) is None
    # the rule's own precondition still applies to the mixed rows
    assert make_defense("krum", f=2, nnm=1).rule_precondition(5) == "n > 2f + 2 (n=5, f=2)"
    with pytest.raises(PreconditionError, match=r"'median': needs n > 2F .* \(n=4, F=2\)"):
        d(batch([[0.0]] * 4), ctx())


@pytest.mark.parametrize(
    ("name", "params", "pattern"),
    [
        ("median", {"nnm": -1}, r"'median': nnm -1 invalid; valid: integer >= 0"),
        ("median", {"nnm": 1.5}, r"'median': nnm 1.5 invalid"),
        ("median", {"nnm": 1, "bucket": 2}, r"bucket=2 and nnm=1 both set; valid: one of them"),
        ("median", {"nnm": 1, "nnm_rank": "cos"}, r"nnm_rank 'cos' invalid; valid: \['distance'"),
        ("fltrust", {"nnm": 1}, r"'fltrust': unknown parameter 'nnm'"),
    ],
)
def test_bad_nnm_parameters(name: str, params: dict[str, object], pattern: str) -> None:
    with pytest.raises(ValueError, match=pattern):
        make_defense(name, **params)
