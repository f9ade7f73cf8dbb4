"""Client data sources: a selected client's local data, on demand, from its id.

The client population is independent of the dataset: a source answers "which rows does client
``c`` hold" for the clients asked about, at a cost proportional to their number, and holds
nothing per client for all ``num_clients`` (except :class:`PartitionData`, a real split of the
dataset).  Sources: :class:`PartitionData` (CSR partition of the training set),
:class:`NaturalData` (LEAF writers, FedProx devices), :class:`~simulator.data.virtual.VirtualData`
(log-normal size, Dirichlet label mix, drawn from the pool) and
:class:`~simulator.data.generated.SyntheticDevices` (FedProx devices generated on demand); the
package :mod:`simulator.data` exports them all.  A client's data is a pure function of the
construction arguments and its id, whatever else was asked before or in the same call.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

import numpy as np

from simulator.data.rows import ClientRows, check_fraction, check_seed, holdout_counts

__all__ = ["LOCAL_TEST_TAG", "ClientData", "NaturalData", "PartitionData", "with_local_test"]

LOCAL_TEST_TAG = 0x7E57  # tag of the split that gives a partition's per-client local test data


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
            raise IndexError(
                f"client ids must be in 0..{self.num_clients - 1}, got "
                f"{int(arr.min())}..{int(arr.max())}"
            )
        return arr

    @abstractmethod
    def sizes(self, ids: np.ndarray) -> np.ndarray:
        """Training-sample counts of clients ``ids`` (int64, vectorized)."""

    @abstractmethod
    def rows(self, ids: Sequence[int] | np.ndarray) -> ClientRows:
        """Local data of clients ``ids``, a pure function of the source and each id."""

    def split(self, fraction: float, *, seed: int, tag: int) -> tuple[ClientData, ClientData]:
        """Split every client's rows in two: ``(kept, held)``.

        A client of ``n >= 2`` rows holds out ``min(max(1, round(fraction * n)), n - 1)``
        rows, one of a single row holds out none.  Client ``c``'s split is the permutation
        drawn from ``default_rng([seed, tag, c])``, computed on demand; ``fraction`` is in
        (0, 1), ``seed`` and ``tag`` (naming the split's purpose) are non-negative.  Both
        sources refer to the same pool (or generated samples) as this one.
        """
        check_fraction(fraction)
        check_seed("seed", seed)
        check_seed("tag", tag)
        return (
            _SplitView(self, fraction, int(seed), int(tag), held=False),
            _SplitView(self, fraction, int(seed), int(tag), held=True),
        )

    @abstractmethod
    def local_test(self, fraction: float, *, seed: int) -> ClientData:
        """Source of each client's local test data (see :attr:`local_test_pool`)."""

    @abstractmethod
    def nbytes(self) -> int:
        """Bytes of array memory held by the source (independent of ``num_clients`` except
        for :class:`PartitionData`)."""


class _SplitView(ClientData):
    """One side of an on-demand per-client split of another source (see ``ClientData.split``)."""

    def __init__(
        self, parent: ClientData, fraction: float, seed: int, tag: int, *, held: bool
    ) -> None:
        self.parent, self.fraction, self.seed, self.tag, self.held = (
            parent,
            fraction,
            seed,
            tag,
            held,
        )
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


def with_local_test(
    source: ClientData, fraction: float, seed: int
) -> tuple[ClientData, ClientData, str]:
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


class PartitionData(ClientData):
    """A real partition of the training set in CSR form.

    Client ``c`` holds training rows ``index_flat[offsets[c]:offsets[c + 1]]``.  Its local test
    data is a held part of its own rows (indices into the training set): train on
    ``split(fraction, seed=seed, tag=LOCAL_TEST_TAG)[0]`` when evaluating on
    ``local_test(fraction, seed=seed)``, or use :func:`with_local_test`.

    Parameters
    ----------
    index_flat : ndarray
        Concatenated int64 row numbers of all clients.
    offsets : ndarray
        ``num_clients + 1`` non-decreasing offsets, ``offsets[0] == 0`` and
        ``offsets[-1] == len(index_flat)``.
    """

    local_test_pool = "train"

    def __init__(self, index_flat: np.ndarray, offsets: np.ndarray) -> None:
        self.index_flat = np.asarray(index_flat, dtype=np.int64).reshape(-1)
        self.offsets = np.asarray(offsets, dtype=np.int64).reshape(-1)
        o = self.offsets
        if len(o) < 2 or o[0] != 0 or o[-1] != len(self.index_flat) or np.any(np.diff(o) < 0):
            raise ValueError(
                f"offsets must rise from 0 to len(index_flat)="
                f"{len(self.index_flat)} over num_clients + 1 >= 2 entries"
            )
        self.num_clients = len(o) - 1

    @classmethod
    def from_lists(cls, parts: Sequence[np.ndarray]) -> PartitionData:
        """Build from one row array per client (e.g. the output of ``partition``)."""
        arrays = [np.asarray(p, dtype=np.int64).reshape(-1) for p in parts]
        offsets = np.concatenate([[0], np.cumsum([len(a) for a in arrays], dtype=np.int64)])
        return cls(np.concatenate([np.zeros(0, np.int64), *arrays]), offsets)

    def to_lists(self) -> list[np.ndarray]:
        """One row array per client (copies), the form ``partition`` returns."""
        return self.rows(np.arange(self.num_clients)).index

    def sizes(self, ids: np.ndarray) -> np.ndarray:
        ids = self._ids(ids)
        return self.offsets[ids + 1] - self.offsets[ids]

    def rows(self, ids: Sequence[int] | np.ndarray) -> ClientRows:
        o, flat = self.offsets, self.index_flat
        return ClientRows(
            None, None, [flat[o[c] : o[c + 1]].copy() for c in self._ids(ids).tolist()]
        )

    def split(self, fraction: float, *, seed: int, tag: int) -> tuple[PartitionData, PartitionData]:
        """Split every client's rows in two: ``(kept, held)``, both :class:`PartitionData`.

        Reproduces, bit for bit, the sequential holdout loop (Siren's): one generator
        ``default_rng([seed, tag])`` and, for clients 0, 1, 2, ... in order,
        ``perm = rng.permutation(n)``, ``held = sort(rows[perm[:k]])``,
        ``kept = sort(rows[perm[k:]])`` with ``k = min(max(1, round(fraction * n)), n - 1)``
        (0 for ``n < 2``).  This loop over all clients is bounded by the dataset's rows.
        """
        check_fraction(fraction)
        rng = np.random.default_rng([seed, tag])
        kept: list[np.ndarray] = []
        held: list[np.ndarray] = []
        counts = holdout_counts(np.diff(self.offsets), fraction)
        for c in range(self.num_clients):
            rows = self.index_flat[self.offsets[c] : self.offsets[c + 1]]
            k = int(counts[c])
            perm = rng.permutation(len(rows))
            held.append(np.sort(rows[perm[:k]]))
            kept.append(np.sort(rows[perm[k:]]))
        return PartitionData.from_lists(kept), PartitionData.from_lists(held)

    def local_test(self, fraction: float, *, seed: int) -> PartitionData:
        """Held part of ``split(fraction, seed=seed, tag=LOCAL_TEST_TAG)``: training-set rows.

        The caller must train on the kept part, ``split(...)[0]``, not on this source.
        """
        return self.split(fraction, seed=seed, tag=LOCAL_TEST_TAG)[1]

    def nbytes(self) -> int:
        return int(self.index_flat.nbytes + self.offsets.nbytes)


class NaturalData(PartitionData):
    """Natural clients (LEAF writers, FedProx devices): client ``c`` is one writer's rows.

    Build with :meth:`from_groups`; ``writers[c]`` is the group id of client ``c``.
    """

    def __init__(
        self, index_flat: np.ndarray, offsets: np.ndarray, writers: np.ndarray | None = None
    ) -> None:
        super().__init__(index_flat, offsets)
        self.writers = (
            np.arange(self.num_clients, dtype=np.int64) if writers is None else np.asarray(writers)
        )

    @classmethod
    def from_groups(cls, groups: np.ndarray, num_clients: int, *, seed: int) -> NaturalData:
        """Client ``c`` holds the rows of writer ``perm[c]``, ``perm`` a seeded permutation.

        ``perm = default_rng(seed).permutation(unique(groups))``, so the clients are those of
        ``partition(labels, num_clients, "natural", seed=seed, groups=groups)``.

        Raises
        ------
        ValueError
            ``num_clients`` exceeds the number of writers (both numbers in the message).
        """
        groups = np.asarray(groups).reshape(-1)
        uniq, inverse = np.unique(groups, return_inverse=True)
        if int(num_clients) != num_clients or num_clients < 1:
            raise ValueError(f"num_clients must be a positive integer, got {num_clients}")
        if num_clients > len(uniq):
            raise ValueError(
                f"natural clients: num_clients={num_clients} exceeds the "
                f"{len(uniq)} writers in the data"
            )
        perm = np.random.default_rng(seed).permutation(len(uniq))[:num_clients]
        client_of = np.full(len(uniq), -1, dtype=np.int64)  # writer (sorted) -> client
        client_of[perm] = np.arange(num_clients, dtype=np.int64)
        owner = client_of[inverse]
        rows = np.flatnonzero(owner >= 0)
        rows = rows[np.argsort(owner[rows], kind="stable")]  # by client, rows ascending
        counts = np.bincount(owner[owner >= 0], minlength=num_clients)
        offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        return cls(rows.astype(np.int64), offsets, uniq[perm])

    def nbytes(self) -> int:
        return super().nbytes() + int(self.writers.nbytes)
