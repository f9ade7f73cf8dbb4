"""Client data sources: a selected client's local data, on demand, from its id.

The client population is independent of the dataset: a source answers "which rows does client
``c`` hold" for the clients asked about, at a cost proportional to their number, and holds
nothing per client for all ``num_clients`` (except :class:`PartitionData`, a real split of the
dataset).  Sources: :class:`.partitioned.PartitionData` (CSR partition, today's behaviour),
:class:`.partitioned.NaturalData` (LEAF writers), :class:`.virtual.VirtualData` (log-normal
size, Dirichlet label mix, drawn from the pool) and :class:`.generated.SyntheticDevices`
(FedProx devices generated on demand); all of them, and ``synthetic_test_set``, can also be
imported from here.  A client's data is a pure function of the construction arguments and its
id, whatever else was asked before or in the same call.
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from scipy.special import ndtri

from simulator.rng import mix64

if TYPE_CHECKING:  # defined in .partitioned, re-exported lazily (see __getattr__ below)
    from .partitioned import NaturalData, PartitionData

__all__ = [
    "LOCAL_TEST_TAG",
    "ClientRows",
    "ClientData",
    "PartitionData",
    "NaturalData",
    "hash_normal",
    "holdout_counts",
    "with_local_test",
]

LOCAL_TEST_TAG = 0x7E57  # tag of the split that gives a partition's per-client local test data

_U64 = (1 << 64) - 1


def hash_normal(seed: int, ids: np.ndarray, tag: int) -> np.ndarray:
    """Standard normal draws that are a pure, vectorized function of ``(seed, tag, id)``.

    A splitmix64-style hash of the three integers gives 53 random bits, i.e. a uniform
    ``u = (bits + 0.5) / 2**53`` in the open interval (0, 1), mapped to ``N(0, 1)`` by the
    inverse normal CDF (``scipy.special.ndtri``).  ``|z|`` never exceeds about 8.3.

    Parameters
    ----------
    seed : int
        Experiment seed (any integer; taken modulo 2**64).
    ids : ndarray
        Integer ids, any shape.
    tag : int
        Stream tag, so that different uses of the same (seed, id) are independent.

    Returns
    -------
    ndarray
        float64 array of the shape of ``ids``.
    """
    key = mix64(np.array([int(seed) & _U64], dtype=np.uint64))
    key = mix64(key ^ np.array([int(tag) & _U64], dtype=np.uint64))
    h = mix64(key ^ mix64(np.asarray(ids, dtype=np.int64).view(np.uint64)))
    u = ((h >> np.uint64(11)).astype(np.float64) + 0.5) * 2.0**-53
    return ndtri(u)


def holdout_counts(n: np.ndarray, fraction: float) -> np.ndarray:
    """Rows held out of clients of ``n`` rows: ``min(max(1, round(fraction * n)), n - 1)``.

    A client with a single row (or none) holds out 0; rounding is half-to-even like Python's
    ``round``.  Vectorized; returns int64 of the shape of ``n``.
    """
    n = np.asarray(n, dtype=np.int64)
    k = np.minimum(np.maximum(1, np.rint(fraction * n).astype(np.int64)), n - 1)
    return np.where(n >= 2, k, 0).astype(np.int64)


def _check_fraction(fraction: float) -> None:
    if not 0.0 < fraction < 1.0:
        raise ValueError(f"split fraction must be in (0, 1), got {fraction}")


def _check_seed(name: str, value: int) -> None:
    if int(value) != value or value < 0:
        raise ValueError(f"{name} must be a non-negative integer, got {value!r}")


@dataclass(frozen=True)
class ClientRows:
    """Local data of some clients.

    ``x``/``y`` are None when ``index`` refers to the pool the source was built on (the
    training set, or the test set for a local-test source); otherwise they hold generated
    samples (float32 ``[M, *input_shape]``, int64 ``[M]``) and ``index`` refers to them.
    ``index`` holds one int64 array of row numbers per requested client, in request order.
    """

    x: np.ndarray | None
    y: np.ndarray | None
    index: list[np.ndarray]


class ClientData(ABC):
    """A population of ``num_clients`` clients whose local data is given on demand.

    Attributes
    ----------
    num_clients : int
        Number of clients; ids are ``0..num_clients-1``.
    local_test_pool : str
        ``"train"`` when the indices of :meth:`local_test` refer to the training set (then
        the client must train on ``split(fraction, seed=seed, tag=LOCAL_TEST_TAG)[0]``, see
        :func:`with_local_test`), ``"test"`` when they refer to the test set or to generated
        samples.
    """

    num_clients: int
    local_test_pool: str = "test"

    def _ids(self, ids: Sequence[int] | np.ndarray) -> np.ndarray:
        """Client ids as a 1-D int64 array, checked to lie in ``0..num_clients-1``."""
        arr = np.asarray(ids, dtype=np.int64).reshape(-1)
        if arr.size and (arr.min() < 0 or arr.max() >= self.num_clients):
            raise IndexError(f"client ids must be in 0..{self.num_clients - 1}, got "
                             f"{int(arr.min())}..{int(arr.max())}")
        return arr

    @abstractmethod
    def sizes(self, ids: np.ndarray) -> np.ndarray:
        """Training-sample counts of clients ``ids`` (int64, vectorized)."""

    @abstractmethod
    def rows(self, ids: Sequence[int] | np.ndarray) -> ClientRows:
        """Local data of clients ``ids``, a pure function of the source and each id."""

    def split(self, fraction: float, *, seed: int,
              tag: int) -> tuple[ClientData, ClientData]:
        """Split every client's rows in two: ``(kept, held)``.

        A client of ``n >= 2`` rows holds out ``min(max(1, round(fraction * n)), n - 1)``
        rows, one of a single row holds out none.  Client ``c``'s split is the permutation
        drawn from ``default_rng([seed, tag, c])``, computed on demand; ``fraction`` is in
        (0, 1), ``seed`` and ``tag`` (naming the split's purpose) are non-negative.  Both
        sources refer to the same pool (or generated samples) as this one.
        """
        _check_fraction(fraction)
        _check_seed("seed", seed)
        _check_seed("tag", tag)
        return (_SplitView(self, fraction, int(seed), int(tag), held=False),
                _SplitView(self, fraction, int(seed), int(tag), held=True))

    @abstractmethod
    def local_test(self, fraction: float, *, seed: int) -> ClientData:
        """Source of each client's local test data (see :attr:`local_test_pool`)."""

    @abstractmethod
    def nbytes(self) -> int:
        """Bytes of array memory held by the source (independent of ``num_clients`` except
        for :class:`PartitionData`)."""


class _SplitView(ClientData):
    """One side of an on-demand per-client split of another source (see ``ClientData.split``)."""

    def __init__(self, parent: ClientData, fraction: float, seed: int, tag: int, *,
                 held: bool) -> None:
        self.parent, self.fraction, self.seed, self.tag, self.held = (
            parent, fraction, seed, tag, held)
        self.num_clients = parent.num_clients
        self.local_test_pool = parent.local_test_pool

    def sizes(self, ids: np.ndarray) -> np.ndarray:
        n = self.parent.sizes(self._ids(ids))
        k = holdout_counts(n, self.fraction)
        return k if self.held else n - k

    def rows(self, ids: Sequence[int] | np.ndarray) -> ClientRows:
        ids = self._ids(ids)
        full = self.parent.rows(ids)
        out = []
        for c, rows in zip(ids.tolist(), full.index, strict=True):
            k = int(holdout_counts(np.array(len(rows)), self.fraction))
            perm = np.random.default_rng([self.seed, self.tag, c]).permutation(len(rows))
            out.append(np.sort(rows[perm[:k] if self.held else perm[k:]]))
        return ClientRows(full.x, full.y, out)

    def local_test(self, fraction: float, *, seed: int) -> ClientData:
        """The parent's local test data, or (training-set pools) a held part of this view."""
        if self.local_test_pool == "train":
            return self.split(fraction, seed=seed, tag=LOCAL_TEST_TAG)[1]
        return self.parent.local_test(fraction, seed=seed)

    def nbytes(self) -> int:
        return self.parent.nbytes()


def with_local_test(source: ClientData, fraction: float,
                    seed: int) -> tuple[ClientData, ClientData, str]:
    """Training source, local-test source and the pool the test indices refer to.

    For a source whose local test rows come out of its own training rows
    (``local_test_pool == "train"``: :class:`PartitionData`) the training source is the kept
    part of ``split(fraction, seed=seed, tag=LOCAL_TEST_TAG)`` and the test source its held
    part; otherwise the source is unchanged and the test source is ``local_test(...)``.

    Returns
    -------
    (train_source, test_source, test_pool) : tuple
        ``test_pool`` is ``"train"`` or ``"test"``: which dataset arrays the test indices
        refer to (rows carrying their own ``x``/``y`` refer to those).
    """
    if source.local_test_pool == "train":
        train, test = source.split(fraction, seed=seed, tag=LOCAL_TEST_TAG)
        return train, test, "train"
    return source, source.local_test(fraction, seed=seed), "test"


_LAZY = {"PartitionData": ".partitioned", "NaturalData": ".partitioned",
         "VirtualData": ".virtual", "SyntheticDevices": ".generated",
         "synthetic_test_set": ".generated"}


def __getattr__(name: str) -> object:
    """Lazy re-exports of the sources defined in :mod:`.partitioned`, :mod:`.virtual` and
    :mod:`.generated`."""
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name], __package__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
