"""What a dataset loader returns (:class:`Dataset`) and the helpers loaders share.

A loader is one file of :mod:`simulator.data.datasets`, registered with
``@DATASETS.register("name")``; see that package for its signature.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from simulator.data.formats import DataError
from simulator.data.holdout import stratified_split

__all__ = ["Dataset", "require_dir", "split_pooled"]


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
                raise DataError(
                    f"{self.name}: {split} dtypes {x.dtype}/{y.dtype}, expected float32/int64"
                )
            if x.shape[1:] != tuple(self.input_shape) or x.shape[0] != y.shape[0]:
                raise DataError(
                    f"{self.name}: {split} shapes {x.shape}/{y.shape} do not match "
                    f"input_shape {self.input_shape}"
                )
            if y.size and (y.min() < 0 or y.max() >= self.num_classes):
                raise DataError(f"{self.name}: {split} labels outside 0..{self.num_classes - 1}")
        if self.groups is not None and self.groups.shape != self.y_train.shape:
            raise DataError(
                f"{self.name}: groups shape {self.groups.shape} != "
                f"y_train shape {self.y_train.shape}"
            )


def split_pooled(
    name: str, x: np.ndarray, y: np.ndarray, *, seed: int, test_fraction: float, num_classes: int
) -> Dataset:
    """Seeded stratified train/test split of a pooled dataset."""
    test_idx, train_idx = stratified_split(y, test_fraction, np.random.default_rng(seed))
    return Dataset(
        name,
        x[train_idx].astype(np.float32),
        y[train_idx].astype(np.int64),
        x[test_idx].astype(np.float32),
        y[test_idx].astype(np.int64),
        num_classes,
        tuple(x.shape[1:]),
    )


def require_dir(path: str, name: str) -> Path:
    """``path`` as a directory; DataError naming dataset ``name`` when it is none."""
    p = Path(path)
    if not p.is_dir():
        raise DataError(f"dataset {name!r}: path {p} is not a directory")
    return p
