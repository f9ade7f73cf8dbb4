"""Our Sageflow variants (defenses/sageflow.py): the entropy filter relative to each row's base
model (``entropy_filter="relative"``) and late updates applied to the current model
(``stale="updates"``), by hand on a stub scorer."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from defense_stubs import Scorer, batch_of, ctx_of, fixed_scorer
from test_sageflow import ROWS, STALE_BASES, STALE_M, STALE_ROWS, STALE_TAUS, M

from defenses import make_defense


def first_coordinate_scorer(seen: list[torch.Tensor]) -> Scorer:
    """Entropy 3 + x_0 and loss 1 for every model row x; records each call's models."""

    def score(models: torch.Tensor) -> dict[str, np.ndarray]:
        seen.append(models.clone())
        x = models.double().numpy()
        return {"accuracy": np.zeros(len(x)), "entropy": 3.0 + x[:, 0], "loss": np.ones(len(x))}

    return score


# t=5 from global [1, 1] (entropy 4) and a stale row from [0, 0] (entropy 3); full models
# [0, 1] (E 3 < 4: kept), [1.5, 2] (E 4.5 >= 4: rejected), [-0.5, 2] (E 2.5 < 3: kept)
REL_ROWS = [[-1.0, 0.0], [0.5, 1.0], [-0.5, 2.0]]


def test_relative_entropy_filter() -> None:
    seen: list[torch.Tensor] = []
    ctx = ctx_of(first_coordinate_scorer(seen), 5, {5: [1.0, 1.0], 4: [0.0, 0.0]})
    rel = make_defense("sageflow", entropy_filter="relative")  # E_th (1.0) unused
    res = rel(batch_of(REL_ROWS, [2, 3, 4], [5, 5, 4]), ctx)
    assert [(v.kept, v.reason) for v in res.verdicts] == [
        (True, ""),
        (False, "entropy>=threshold"),
        (True, "stale"),
    ]
    assert [v.score for v in res.verdicts] == pytest.approx([3.0, 4.5, 2.5])
    # the second call scores the distinct base models, in base-round order
    assert [m.tolist() for m in seen[1:]] == [[[0.0, 0.0], [1.0, 1.0]]]
    # alpha ∝ 2 * 1^-0.5, 4 * 2^-0.5 -> a5 = 1 / (1 + sqrt 2) = sqrt 2 - 1; stale models:
    # delta = a5 [-1, 0] + (1 - a5) ([0, 0] - [1, 1] + [-0.5, 2]) = [sqrt(2) / 2 - 2, 2 - sqrt 2]
    a = math.sqrt(2) - 1
    assert [v.weight for v in res.verdicts] == pytest.approx([a, 0.0, 1 - a])
    assert res.delta.tolist() == pytest.approx([math.sqrt(2) / 2 - 2, 2 - math.sqrt(2)])
    # a margin of 0.6 keeps row 1 (4.5 < 4 + 0.6)
    res = make_defense("sageflow", entropy_filter="relative", entropy_margin=0.6)(
        batch_of(REL_ROWS, [2, 3, 4], [5, 5, 4]), ctx
    )
    assert [v.kept for v in res.verdicts] == [True, True, True]
    # the paper's absolute E_th = 1.0 rejects all three
    res = make_defense("sageflow")(batch_of(REL_ROWS, [2, 3, 4], [5, 5, 4]), ctx)
    assert [v.kept for v in res.verdicts] == [False, False, False]


def test_stale_rows_as_updates() -> None:
    # as test_relative_entropy_filter, the stale row's update applied to the current model:
    # delta = a5 [-1, 0] + (1 - a5) [-0.5, 2] = [-sqrt(2) / 2, 4 - 2 sqrt 2]
    ctx = ctx_of(first_coordinate_scorer([]), 5, {5: [1.0, 1.0], 4: [0.0, 0.0]})
    d = make_defense("sageflow", entropy_filter="relative", stale="updates")
    res = d(batch_of(REL_ROWS, [2, 3, 4], [5, 5, 4]), ctx)
    assert res.delta.tolist() == pytest.approx([-math.sqrt(2) / 2, 4 - 2 * math.sqrt(2)])
    # test_staleness_groups' rows: a = 2 - sqrt 2, delta = a [0.5, 0.5] + (1 - a) [2, 2]
    ctx = ctx_of(fixed_scorer([0.1, 0.1, 0.1], [1.0, 1.0, 1.0]), 5, STALE_BASES)
    res = make_defense("sageflow", stale="updates")(batch_of(STALE_ROWS, STALE_M, STALE_TAUS), ctx)
    assert res.delta.tolist() == pytest.approx([1.5 * math.sqrt(2) - 1] * 2)
    # fresh rows only: both modes agree
    ctx = ctx_of(fixed_scorer([0.1, 0.2, 0.3], [1.0, 2.0, 1.0]))
    res = make_defense("sageflow", stale="updates")(batch_of(ROWS, M), ctx)
    assert res.delta.tolist() == pytest.approx([5 / 3.5, 4.5 / 3.5])
