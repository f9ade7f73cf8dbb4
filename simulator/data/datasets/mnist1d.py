"""``mnist1d``: MNIST-1D (Greydanus, "Scaling down Deep Learning", 2020), generated locally."""

from __future__ import annotations

import random

import numpy as np

from simulator.data.datasets import DATASETS
from simulator.data.datasets.base import Dataset


@DATASETS.register("mnist1d")
def load_mnist1d(*, seed: int, test_fraction: float, num_samples: int = 5000) -> Dataset:
    """MNIST-1D (Greydanus 2020) generated locally with the ``mnist1d`` package; no download.

    The package seeds numpy's and Python's global generators; their states are restored.
    Generation takes about 0.6 s for 5,000 samples.
    """
    from mnist1d.data import get_dataset_args, make_dataset

    args = get_dataset_args()
    args.num_samples = int(num_samples)
    args.train_split = 1.0 - test_fraction
    args.seed = int(seed) % 2**32
    np_state, py_state = np.random.get_state(), random.getstate()
    try:
        d = make_dataset(args)
    finally:
        np.random.set_state(np_state)
        random.setstate(py_state)
    return Dataset(
        "mnist1d",
        d["x"].astype(np.float32),
        d["y"].astype(np.int64),
        d["x_test"].astype(np.float32),
        d["y_test"].astype(np.int64),
        10,
        (40,),
    )
