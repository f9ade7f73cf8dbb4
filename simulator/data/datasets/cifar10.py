"""``cifar10``: CIFAR-10 from the ``cifar-10-batches-py`` directory."""

from __future__ import annotations

import numpy as np

from simulator.data.cifar_batch import read_cifar_batch
from simulator.data.datasets import DATASETS
from simulator.data.datasets.base import Dataset, require_dir


@DATASETS.register("cifar10")
def load_cifar10(*, seed: int, path: str, test_fraction: float) -> Dataset:
    """CIFAR-10 from the ``cifar-10-batches-py`` directory (data_batch_1..5, test_batch).

    Pixels are scaled by /255 to ``[N, 3, 32, 32]``; the official split is kept. Each batch
    must hold images (an empty ``test_batch`` would score every run 0).
    """
    root = require_dir(path, "cifar10")
    train = [read_cifar_batch(root / f"data_batch_{i}") for i in range(1, 6)]
    x_te, y_te = read_cifar_batch(root / "test_batch")
    x_tr = np.concatenate([b[0] for b in train])
    y_tr = np.concatenate([b[1] for b in train])  # each batch's labels are checked: 0..9
    scale = np.float32(1.0 / 255.0)  # float32 throughout: 50k images are 600 MB, not 1.2 GB
    return Dataset(
        "cifar10",
        x_tr.astype(np.float32) * scale,
        y_tr,
        x_te.astype(np.float32) * scale,
        y_te,
        10,
        (3, 32, 32),
    )
