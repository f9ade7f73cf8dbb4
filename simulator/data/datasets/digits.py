"""``digits``: scikit-learn's 1,797 8x8 digits (bundled, offline)."""

from __future__ import annotations

from simulator.data.datasets import DATASETS
from simulator.data.datasets.base import Dataset, split_pooled


@DATASETS.register("digits")
def load_digits_dataset(*, seed: int, test_fraction: float) -> Dataset:
    """scikit-learn's 1,797 8x8 digits (bundled, offline), scaled to [0, 1] by /16."""
    from sklearn.datasets import load_digits

    bunch = load_digits()
    x = (bunch.data / 16.0).reshape(-1, 1, 8, 8)
    return split_pooled(
        "digits", x, bunch.target, seed=seed, test_fraction=test_fraction, num_classes=10
    )
