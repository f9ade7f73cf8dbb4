"""How many training rows a dataset read from files holds, measured before it is loaded.

For the memory check made before a run starts (:mod:`simulator.run.budget`): the count must be
cheap (no file is parsed in full) and never below what the loader will read, so a run that
cannot fit is still refused, while a small set on disk is sized as small.

==================  =============================================================================
``mnist_idx``       the image count (and image size) in the training images' idx header: 16
                    bytes read, through gzip for ``.gz``
``cifar10``         each ``data_batch_i``'s size over 3,072 bytes (an image's pixels); the real
                    batches (~31,035,000 bytes each) give ~50,510 for 50,000
``femnist_leaf``    each ``train/*.json``'s ``num_samples`` total from its first MiB (the loader
                    checks it against the data), else its size over 1,569 bytes (the fewest a
                    784-value sample takes in JSON)
==================  =============================================================================

Files missing or unreadable count 0 rows: the loader reports them, by name, when it runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from simulator.data import cifar_batch, leaf_json
from simulator.data.datasets.mnist_idx import IDX_NAMES
from simulator.data.formats import DataError, find_file, idx_dims

__all__ = ["OnDisk", "rows_on_disk"]


@dataclass(frozen=True)
class OnDisk:
    """Training rows on disk (an upper bound), and one input's shape where the files say it."""

    rows: int
    shape: tuple[int, ...] | None = None


def _mnist_idx(root: Path) -> OnDisk:
    try:
        dims = idx_dims(find_file(root, IDX_NAMES["x_train"]))
    except DataError:
        return OnDisk(0)
    if len(dims) != 3:
        return OnDisk(dims[0] if dims else 0)
    return OnDisk(dims[0], (1, dims[1], dims[2]))


def _cifar10(root: Path) -> OnDisk:
    rows = sum(cifar_batch.rows_bound(root / f"data_batch_{i}") for i in range(1, 6))
    return OnDisk(rows, (3, 32, 32))


def _femnist_leaf(root: Path) -> OnDisk:
    return OnDisk(leaf_json.rows_bound(root / "train", 784), (1, 28, 28))


_SIZERS = {"mnist_idx": _mnist_idx, "cifar10": _cifar10, "femnist_leaf": _femnist_leaf}


def rows_on_disk(dataset: str, path: str | None) -> OnDisk | None:
    """The training rows (at most) of ``dataset`` in ``path``; None for a dataset not sized
    from files here, or without a path."""
    sizer = _SIZERS.get(dataset)
    if sizer is None or path is None:
        return None
    return sizer(Path(path))
