"""The driver's row path at cohort scale: no needless copies, same values."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

import actors.merge as merge
import simulator.round.collect as collect
from actors.arena import Arena
from actors.merge import merge_results
from defenses import UpdateBatch
from simulator.round.collect import stack_rows
from simulator.round.engine import Simulation
from simulator.round.types import RoundRecord


def test_rows_of_one_matrix_are_gathered_or_sliced() -> None:
    m = np.arange(20, dtype=np.float32).reshape(5, 4).copy()  # owns its rows, as a merge
    got = stack_rows([m[3], m[0], m[4]])
    assert np.array_equal(got, np.stack([m[3], m[0], m[4]]))
    view = stack_rows([m[1], m[2], m[3]])  # its rows in order: a slice, no copy
    assert np.array_equal(view, m[1:4]) and np.shares_memory(view, m)
    other = np.ones(4, np.float32)  # rows of different matrices: stacked as before
    assert np.array_equal(stack_rows([m[0], other]), np.stack([m[0], other]))


def test_rows_of_several_matrices_reuse_a_released_buffer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Carried rows with fresh ones (several bases): stacked as np.stack does, into the arena's
    buffer, which a later batch reuses once the first is let go."""
    monkeypatch.setattr(collect.ORDERED, "min_bytes", 0)
    monkeypatch.setattr(collect.ORDERED, "_bufs", [])
    a = np.arange(8, dtype=np.float32).reshape(2, 4).copy()
    b = np.arange(8, 16, dtype=np.float32).reshape(2, 4).copy()
    first = stack_rows([b[1], a[0], b[0]])
    assert first[:, 0].tolist() == [12.0, 0.0, 8.0] and first.dtype == np.float32
    assert collect.ORDERED._bufs == [first]  # the arena's buffer (identity, not an address)
    key = id(first)
    second = stack_rows([a[1], b[1], a[0]])  # first is still held: another buffer
    assert second is not first and collect.ORDERED._bufs[1] is second
    assert first[:, 0].tolist() == [12.0, 0.0, 8.0]
    del first
    third = stack_rows([a[0], b[0], a[1]])
    assert id(third) == key and collect.ORDERED._bufs[0] is third  # the released one, reused
    assert np.array_equal(third, np.stack([a[0], b[0], a[1]]))
    assert second[:, 0].tolist() == [4.0, 12.0, 0.0]
    with pytest.raises(ValueError, match="different shapes"):  # never broadcast a short row
        stack_rows([a[0], b[0, :1]])


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


def test_merge_puts_rows_in_client_order_and_the_batch_slices_them() -> None:
    a, b = np.full((2, 3), 1.0, np.float32), np.full((1, 3), 2.0, np.float32)
    a[1] = 3.0
    inorder = merge_results([_part([7, 8], a), _part([9], b)], [7, 8, 9])
    assert inorder["row_ids"].tolist() == [7, 8, 9]
    assert inorder["rows"][:, 0].tolist() == [1.0, 3.0, 2.0]
    # answers of clients 9, 7 (rows 1, 3) and 8 (row 2), the round's order 9, 8, 7: rows by id
    scrambled = merge_results([_part([9, 7], a), _part([8], b)], [9, 8, 7])
    assert scrambled["client_ids"].tolist() == [9, 8, 7]  # per-client fields follow the round
    assert scrambled["row_ids"].tolist() == [7, 8, 9]
    assert scrambled["rows"][:, 0].tolist() == [3.0, 2.0, 1.0]
    one = merge_results([_part([9, 7], a)], [9, 7])  # one answer, rows not in id order
    assert one["row_ids"].tolist() == [7, 9] and one["rows"][:, 0].tolist() == [3.0, 1.0]
    # the batch stacks rows by ascending client id: a slice of the merged rows, no copy
    m = scrambled["rows"]
    stacked = stack_rows([m[i] for i in range(3)])
    assert np.shares_memory(stacked, m) and stacked[:, 0].tolist() == [3.0, 2.0, 1.0]


def test_arena_hands_a_buffer_out_again_only_once_unreferenced() -> None:
    arena = Arena(keep=2, min_bytes=64)
    a = arena.empty((4, 8), np.float32)  # 128 bytes: kept
    where = a.__array_interface__["data"][0]
    del a
    b = arena.empty((4, 8), np.float32)
    assert b.__array_interface__["data"][0] == where  # reused
    t = torch.from_numpy(b)  # a tensor over it: in use
    row = b[1]  # and a view of it
    del b
    c = arena.empty((4, 8), np.float32)
    assert not np.shares_memory(c, t.numpy())
    del t
    d = arena.empty((4, 8), np.float32)  # the view still holds the first buffer
    assert not np.shares_memory(d, row) and not np.shares_memory(d, c)
    assert len(arena._bufs) == 2  # keep=2: the first buffer left the arena, not freed
    assert arena.empty((2, 8), np.float32).shape == (2, 8)  # another shape: a new array
    small = Arena(min_bytes=1024)
    assert small.empty((4, 8), np.float32) is not small.empty((4, 8), np.float32)


def test_gathered_rows_never_overwrite_a_batch_still_in_use(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(collect.ORDERED, "min_bytes", 0)
    monkeypatch.setattr(collect.ORDERED, "_bufs", [])
    m = np.arange(20, dtype=np.float32).reshape(5, 4).copy()
    first = stack_rows([m[3], m[0], m[4]])
    second = stack_rows([m[4], m[1], m[2]])
    assert first[:, 0].tolist() == [12.0, 0.0, 16.0]  # untouched by the second gather
    assert second[:, 0].tolist() == [16.0, 4.0, 8.0]
    assert collect.ORDERED._bufs == [first, second]  # the arena's buffers (by identity)
    key = id(second)
    del second
    third = stack_rows([m[0], m[1], m[3]])
    assert id(third) == key and collect.ORDERED._bufs[1] is third  # the released one, reused
    assert third[:, 0].tolist() == [0.0, 4.0, 12.0] and first[:, 0].tolist() == [12.0, 0.0, 16.0]


def test_run_lets_go_of_each_rounds_rows(make_config: Callable[..., Any]) -> None:
    seen = []

    class Hook:
        needs_rows = True

        def on_round_end(self, sim: Simulation, record: RoundRecord) -> None:
            seen.append(record.rows is not None and len(record.rows) > 0)

    sim = Simulation(make_config(rounds=3), [Hook()])
    try:
        records = sim.run()
    finally:
        sim.close()
    assert seen == [True, True, True]  # the hooks got every round's rows
    assert [r.rows for r in records] == [None, None, None]  # the returned records hold none


def test_closing_a_simulation_lets_go_of_the_row_buffers(make_config: Callable[..., Any]) -> None:
    sim = Simulation(make_config(rounds=1))
    arenas = (merge.ROWS, collect.ORDERED)
    held = [a.empty((600, 2000), np.float32) for a in arenas]  # 4.8 MB: kept by the arena
    assert all(any(b is h for b in a._bufs) for a, h in zip(arenas, held, strict=True))
    sim.close()
    assert merge.ROWS._bufs == [] and collect.ORDERED._bufs == []
    assert held[0].shape == (600, 2000)  # a buffer still in use lives on with its user
