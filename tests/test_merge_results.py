"""merge_results: workers' answers combined into one round result (actors/merge.py)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from actors.merge import merge_results


def part(
    clients: list[int], returned: list[int], agg: list[float] | None, weight: float, seconds: float
) -> dict[str, Any]:
    """A worker's compact answer: per-client numbers (id, loss, steps, samples, finite,
    returned) in one array, the returned rows, the partial sum."""
    rows = np.array([[float(c)] * 2 for c in returned], np.float32).reshape(-1, 2)
    meta = np.array([[c, c / 10, 2 * c, 3 * c, 1.0, float(c in returned)] for c in clients])
    return {
        "meta": meta.reshape(-1, 6),
        "rows": rows if returned else None,
        "sum": None if agg is None else np.array(agg),
        "sum_weight": weight,
        "outputs": {"e": np.array(clients, np.float32)[:, None]},
        "seconds": seconds,
    }


def test_merge_results_orders_by_client_order() -> None:
    parts = [part([5, 1], [1], [1.0, 2.0], 3.0, 0.5), part([2, 7], [2, 7], [0.5, 0.5], 1.0, 2.0)]
    out = merge_results(parts, [1, 2, 5, 7])
    assert out["client_ids"].tolist() == [1, 2, 5, 7]
    assert out["losses"].tolist() == pytest.approx([0.1, 0.2, 0.5, 0.7])
    assert out["steps"].tolist() == [2, 4, 10, 14]
    assert out["num_samples"].tolist() == [3, 6, 15, 21]
    assert out["row_ids"].tolist() == [1, 2, 7]
    assert out["rows"].tolist() == [[1.0, 1.0], [2.0, 2.0], [7.0, 7.0]]
    assert out["sum"].tolist() == [1.5, 2.5] and out["sum_weight"] == 4.0
    assert out["outputs"]["e"].ravel().tolist() == [1.0, 2.0, 5.0, 7.0]
    assert out["seconds"] == 2.0
    rev = merge_results(parts, [7, 5, 2, 1])
    assert rev["client_ids"].tolist() == [7, 5, 2, 1]
    assert rev["row_ids"].tolist() == [1, 2, 7]  # rows by client id, whatever the round's order
    assert rev["rows"].tolist() == [[1.0, 1.0], [2.0, 2.0], [7.0, 7.0]]
    # one chunk per worker answer: steps 2c, samples 3c per client c (see part())
    assert out["chunks"] == [
        {"clients": 2, "max_steps": 10, "steps": 12, "samples": 18, "seconds": 0.5},
        {"clients": 2, "max_steps": 14, "steps": 18, "samples": 27, "seconds": 2.0},
    ]
    one = merge_results(parts[:1], [5, 1])
    assert one["chunks"] == out["chunks"][:1]


def test_merge_results_empty() -> None:
    out = merge_results([], [])
    assert out["client_ids"].tolist() == [] and out["rows"] is None
    assert out["sum"] is None and out["sum_weight"] == 0.0
    only_sums = merge_results([part([3], [], [1.0, 1.0], 2.0, 0.1)], [3])
    assert only_sums["rows"] is None and only_sums["row_ids"].tolist() == []
    assert out["chunks"] == [] and only_sums["chunks"] == [
        {"clients": 1, "max_steps": 6, "steps": 6, "samples": 9, "seconds": 0.1}
    ]
