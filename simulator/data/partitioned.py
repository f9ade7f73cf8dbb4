"""Client data sources that are a real split of the training set (CSR form).

:class:`PartitionData` (a partition of the training set's rows, e.g. iid or Dirichlet) and
:class:`NaturalData` (LEAF writers, FedProx devices: one writer's rows per client).  Both are
re-exported by :mod:`simulator.data.clients`, which defines their base class.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .clients import (
    LOCAL_TEST_TAG,
    ClientData,
    ClientRows,
    _check_fraction,
    holdout_counts,
)


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
            raise ValueError(f"offsets must rise from 0 to len(index_flat)="
                             f"{len(self.index_flat)} over num_clients + 1 >= 2 entries")
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
        return ClientRows(None, None, [flat[o[c]:o[c + 1]].copy()
                                       for c in self._ids(ids).tolist()])

    def split(self, fraction: float, *, seed: int,
              tag: int) -> tuple[PartitionData, PartitionData]:
        """Split every client's rows in two: ``(kept, held)``, both :class:`PartitionData`.

        Reproduces, bit for bit, the sequential holdout loop (Siren's): one generator
        ``default_rng([seed, tag])`` and, for clients 0, 1, 2, ... in order,
        ``perm = rng.permutation(n)``, ``held = sort(rows[perm[:k]])``,
        ``kept = sort(rows[perm[k:]])`` with ``k = min(max(1, round(fraction * n)), n - 1)``
        (0 for ``n < 2``).  This loop over all clients is bounded by the dataset's rows.
        """
        _check_fraction(fraction)
        rng = np.random.default_rng([seed, tag])
        kept: list[np.ndarray] = []
        held: list[np.ndarray] = []
        counts = holdout_counts(np.diff(self.offsets), fraction)
        for c in range(self.num_clients):
            rows = self.index_flat[self.offsets[c]:self.offsets[c + 1]]
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

    def __init__(self, index_flat: np.ndarray, offsets: np.ndarray,
                 writers: np.ndarray | None = None) -> None:
        super().__init__(index_flat, offsets)
        self.writers = (np.arange(self.num_clients, dtype=np.int64) if writers is None
                        else np.asarray(writers))

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
            raise ValueError(f"natural clients: num_clients={num_clients} exceeds the "
                             f"{len(uniq)} writers in the data")
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
