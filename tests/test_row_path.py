"""The driver's row path at cohort scale: no needless copies, same values."""

from __future__ import annotations

import numpy as np
import torch

from actors.merge import merge_results
from defenses import UpdateBatch
from simulator.round.collect import stack_rows


def test_rows_of_one_matrix_are_gathered_or_sliced() -> None:
    m = np.arange(20, dtype=np.float32).reshape(5, 4).copy()  # owns its rows, as a merge
    got = stack_rows([m[3], m[0], m[4]])
    assert np.array_equal(got, np.stack([m[3], m[0], m[4]]))
    view = stack_rows([m[1], m[2], m[3]])  # its rows in order: a slice, no copy
    assert np.array_equal(view, m[1:4]) and np.shares_memory(view, m)
    other = np.ones(4, np.float32)  # rows of different matrices: stacked as before
    assert np.array_equal(stack_rows([m[0], other]), np.stack([m[0], other]))


def test_subset_of_every_row_is_the_batch_itself() -> None:
    b = UpdateBatch(
        torch.arange(6.0).reshape(3, 2),
        np.array([4, 5, 6]),
        np.array([1, 1, 1]),
        np.zeros(3, np.int64),
    )
    assert b.subset(np.arange(3)) is b
    s = b.subset(np.array([2, 0]))
    assert s.client_ids.tolist() == [6, 4] and s.updates.tolist() == [[4.0, 5.0], [0.0, 1.0]]


def _part(ids: list[int], rows: np.ndarray) -> dict:
    meta = np.array([[c, 0.5, 1, 10, 1, 1] for c in ids], np.float64)
    return {"meta": meta, "rows": rows, "sum": None, "sum_weight": 0.0, "seconds": 0.1}


def test_merge_keeps_rows_in_the_round_order() -> None:
    a, b = np.full((2, 3), 1.0, np.float32), np.full((1, 3), 2.0, np.float32)
    a[1] = 3.0
    inorder = merge_results([_part([7, 8], a), _part([9], b)], [7, 8, 9])
    assert inorder["row_ids"].tolist() == [7, 8, 9]
    assert inorder["rows"][:, 0].tolist() == [1.0, 3.0, 2.0]
    reordered = merge_results([_part([7, 8], a), _part([9], b)], [9, 8, 7])
    assert reordered["row_ids"].tolist() == [9, 8, 7]
    assert reordered["rows"][:, 0].tolist() == [2.0, 3.0, 1.0]
