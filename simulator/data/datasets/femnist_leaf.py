"""``femnist_leaf``: LEAF FEMNIST (Caldas et al. 2018), one writer per natural client."""

from __future__ import annotations

import numpy as np

from simulator.data.datasets import DATASETS
from simulator.data.datasets.base import Dataset, require_dir
from simulator.data.leaf_json import read_leaf_dir


@DATASETS.register("femnist_leaf")
def load_femnist_leaf(
    *, seed: int, path: str, test_fraction: float, num_classes: int = 62
) -> Dataset:
    """LEAF FEMNIST (Caldas et al. 2018) from ``path/train/*.json`` and ``path/test/*.json``.

    Pixels are kept as LEAF stores them (floats in [0, 1]); ``groups`` is the index of the
    writer (users sorted by id) of each training sample.  Test users absent from train are
    still included in the test set.
    """
    root = require_dir(path, "femnist_leaf")
    # each shard is checked as it is read (784 values a sample, labels 0..num_classes-1)
    users, xs, ys = read_leaf_dir(root / "train", width=784, num_classes=num_classes)
    _, txs, tys = read_leaf_dir(root / "test", width=784, num_classes=num_classes)
    parts = {
        "train": (np.concatenate(xs), np.concatenate(ys)),
        "test": (np.concatenate(txs), np.concatenate(tys)),
    }
    groups = np.concatenate([np.full(len(y), i, dtype=np.int64) for i, y in enumerate(ys)])
    (x_tr, y_tr), (x_te, y_te) = parts["train"], parts["test"]
    return Dataset(
        "femnist_leaf",
        x_tr.reshape(-1, 1, 28, 28),
        y_tr,
        x_te.reshape(-1, 1, 28, 28),
        y_te,
        num_classes,
        (1, 28, 28),
        groups=groups,
    )
