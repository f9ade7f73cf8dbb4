"""The 'missing' partitioner (FedFM's "Missing k" classes): exact class counts per client."""

from __future__ import annotations

import numpy as np
import pytest

from simulator.config.fields import ConfigError
from simulator.config.sections import build_config
from simulator.data import partition


def test_each_client_lacks_exactly_k_classes_and_shares_are_even() -> None:
    """12 samples, 3 classes of 4, 3 clients each missing 1 class: every client holds exactly
    2 classes; a class held by h clients is cut into shares of 4 // h or 4 // h + 1 (h = 2:
    2 and 2; h = 3: 2, 1, 1; h = 1: 4) that add up to 4."""
    y = np.repeat([0, 1, 2], 4)
    for seed in range(20):
        parts = partition(y, 3, "missing", seed=seed, missing_classes=1)
        assert np.array_equal(np.sort(np.concatenate(parts)), np.arange(12))
        assert [len(np.unique(y[p])) for p in parts] == [2, 2, 2]
        for c in range(3):
            shares = sorted(int((y[p] == c).sum()) for p in parts if (y[p] == c).any())
            assert shares in ([4], [2, 2], [1, 1, 2])


def test_missing_zero_is_every_class_everywhere_and_the_bounds() -> None:
    y = np.repeat([0, 1, 2], 4)
    parts = partition(y, 2, "missing", seed=0, missing_classes=0)
    assert [sorted(np.bincount(y[p], minlength=3).tolist()) for p in parts] == [[2, 2, 2]] * 2
    with pytest.raises(ValueError, match=r"missing_classes must be in \[0, 2\].*got 3"):
        partition(y, 2, "missing", seed=0, missing_classes=3)
    # 2 clients holding 1 class each can never cover 3 classes
    with pytest.raises(ValueError, match="no draw in 5 left every class with a holder"):
        partition(y, 2, "missing", seed=0, missing_classes=2, max_retries=5)


def test_missing_through_the_config() -> None:
    cfg = build_config(flat={"partition": "missing", "missing_classes": 3})
    assert cfg.data.partition == "missing" and cfg.data.missing_classes == 3
    with pytest.raises(ConfigError, match="missing_classes"):
        build_config(flat={"partition": "missing", "missing_classes": -1})
