"""``mnist_idx``: MNIST (or Fashion-MNIST) from the four idx files of a directory."""

from __future__ import annotations

import numpy as np

from simulator.data.datasets import DATASETS
from simulator.data.datasets.base import Dataset, require_dir
from simulator.data.formats import DataError, find_file, read_idx, whole_labels

__all__ = ["IDX_NAMES", "load_mnist_idx"]

#: the names each of the four files may have (a ``.gz`` twin is also looked for)
IDX_NAMES = {
    "x_train": ["train-images-idx3-ubyte", "train-images.idx3-ubyte"],
    "y_train": ["train-labels-idx1-ubyte", "train-labels.idx1-ubyte"],
    "x_test": ["t10k-images-idx3-ubyte", "t10k-images.idx3-ubyte"],
    "y_test": ["t10k-labels-idx1-ubyte", "t10k-labels.idx1-ubyte"],
}


@DATASETS.register("mnist_idx")
def load_mnist_idx(*, seed: int, path: str, test_fraction: float, num_classes: int = 10) -> Dataset:
    """MNIST (or Fashion-MNIST) from the four idx files in ``path`` (optionally ``.gz``).

    The official train/test split is kept, so ``seed`` and ``test_fraction`` are unused.
    Labels must be whole numbers in ``0..num_classes-1`` (float labels such as 0.5 are refused,
    never truncated) and neither split may be empty.
    """
    root = require_dir(path, "mnist_idx")
    files = {key: find_file(root, names) for key, names in IDX_NAMES.items()}
    arrays = {key: read_idx(f, ndim=3 if key.startswith("x") else 1) for key, f in files.items()}
    for split in ("train", "test"):
        x, y = arrays[f"x_{split}"], arrays[f"y_{split}"]
        if x.shape[0] == 0:
            raise DataError(f"{files[f'x_{split}']}: holds no images (header dims {x.shape})")
        if x.shape[0] != y.shape[0]:
            raise DataError(
                f"{files[f'x_{split}']}: {x.shape[0]} images but "
                f"{files[f'y_{split}']} has {y.shape[0]} labels"
            )
        arrays[f"y_{split}"] = whole_labels(y, str(files[f"y_{split}"]), num_classes)
    x_tr, x_te = arrays["x_train"], arrays["x_test"]
    if x_tr.shape[1:] != x_te.shape[1:]:
        raise DataError(f"{root}: train images {x_tr.shape[1:]} vs test images {x_te.shape[1:]}")
    denom = np.float32(255.0 if x_tr.dtype == np.uint8 else 1.0)
    shape = (1, *x_tr.shape[1:])
    return Dataset(
        "mnist_idx",
        (x_tr.astype(np.float32) / denom).reshape(-1, *shape),
        arrays["y_train"],
        (x_te.astype(np.float32) / denom).reshape(-1, *shape),
        arrays["y_test"],
        num_classes,
        shape,
    )
