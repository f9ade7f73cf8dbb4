"""Virtual clients: any number of clients drawn, on demand, from a dataset's rows.

A virtual client is a deterministic draw from a pool of training rows.  Client ``c`` of a
:class:`VirtualData` source has

* a size ``n_c = clip(round(size_median * exp(size_sigma * z_c)), size_min, size_max)``
  (log-normal, ``z_c = hash_normal(seed, c)``, vectorized over ids);
* a label mix ``p_c ~ Dirichlet(alpha)`` over the pool's classes, class counts
  ``~ Multinomial(n_c, p_c)`` and, for each class, rows drawn from that class's pool rows
  (without replacement when the class has enough rows, else with replacement), all from
  ``np.random.default_rng([seed, TAG, c])``.

Only the rows grouped by class (``O(dataset)``) are kept, so ``num_clients`` may be 10**9 and
a round costs ``O(clients asked)``.  Small ``alpha`` concentrates a client on one class, large
``alpha`` approaches the pool's uniform class mix.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .clients import ClientData
from .rows import ClientRows, check_seed, hash_normal

__all__ = ["VirtualData"]

_TAG = 0x7C11  # per-client generator: label mix, class counts, rows
_SIZE_TAG = 0x7C12  # hash stream of the sizes
_TEST_TAG = 0x7C13  # per-client generator of the local test rows


def _group_by_class(
    labels: np.ndarray, rows: np.ndarray, classes: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(classes, grouped_rows, starts)``: rows of ``classes[j]`` are
    ``grouped_rows[starts[j]:starts[j + 1]]`` (ascending); ``classes`` default to those present."""
    lab = labels[rows]
    if classes is None:
        classes = np.unique(lab)
    keep = np.isin(lab, classes)
    rows, lab = rows[keep], lab[keep]
    order = np.argsort(lab, kind="stable")
    rows, lab = rows[order].astype(np.int64), lab[order]
    starts = np.append(np.searchsorted(lab, classes, side="left"), len(lab)).astype(np.int64)
    return classes, rows, starts


def _draw(
    rng: np.random.Generator, p: np.ndarray, n: int, grouped: np.ndarray, starts: np.ndarray
) -> np.ndarray:
    """``n`` rows with class counts ``~ Multinomial(n, p)``; sorted int64."""
    counts = rng.multinomial(n, p)
    parts = [np.zeros(0, np.int64)]
    for j in np.flatnonzero(counts).tolist():
        pool = grouped[starts[j] : starts[j + 1]]
        m = int(counts[j])
        parts.append(pool[rng.choice(len(pool), size=m, replace=m > len(pool))])
    return np.sort(np.concatenate(parts))


class VirtualData(ClientData):
    """``num_clients`` virtual clients drawn on demand from the rows of a labelled pool.

    Parameters
    ----------
    labels : ndarray
        Integer labels of the training set, ``[N]``; row numbers index this array.
    num_clients : int
        Number of clients (any size: nothing is allocated per client).
    seed : int
        Non-negative seed; a client's data is a pure function of ``(seed, client id)`` and the
        other arguments.
    alpha : float
        Dirichlet concentration of each client's label mix (> 0).
    size_median, size_sigma : float
        Median and log-scale spread of the log-normal client size.
    size_min, size_max : int
        Bounds of the client size, ``1 <= size_min <= size_max``.
    pool : ndarray, optional
        Training rows clients draw from (default: all rows), e.g. the rows left after
        ``split_public``.
    test_labels : ndarray, optional
        Labels of the test set; needed only by :meth:`local_test`.
    """

    local_test_pool = "test"

    def __init__(
        self,
        labels: np.ndarray,
        num_clients: int,
        *,
        seed: int,
        alpha: float,
        size_median: float,
        size_sigma: float,
        size_min: int,
        size_max: int,
        pool: np.ndarray | None = None,
        test_labels: np.ndarray | None = None,
    ) -> None:
        labels = np.asarray(labels)
        if labels.ndim != 1 or not np.issubdtype(labels.dtype, np.integer):
            raise ValueError(
                f"labels must be a 1-D integer array, got {labels.dtype} {labels.shape}"
            )
        if int(num_clients) != num_clients or num_clients < 1:
            raise ValueError(f"num_clients must be a positive integer, got {num_clients}")
        check_seed("seed", seed)
        if not alpha > 0:
            raise ValueError(f"alpha must be > 0, got {alpha}")
        if not size_median > 0 or not size_sigma >= 0:
            raise ValueError(
                f"need size_median > 0 and size_sigma >= 0, got {size_median}, {size_sigma}"
            )
        if not 1 <= size_min <= size_max:
            raise ValueError(f"need 1 <= size_min <= size_max, got {size_min}, {size_max}")
        rows = (
            np.arange(len(labels), dtype=np.int64)
            if pool is None
            else np.asarray(pool, dtype=np.int64).reshape(-1)
        )
        if rows.size == 0:
            raise ValueError("the pool of rows is empty")
        if rows.min() < 0 or rows.max() >= len(labels):
            raise ValueError(f"pool rows must be in 0..{len(labels) - 1}")
        self.num_clients = int(num_clients)
        self.seed, self.alpha = int(seed), float(alpha)
        self.size_median, self.size_sigma = float(size_median), float(size_sigma)
        self.size_min, self.size_max = int(size_min), int(size_max)
        self.classes, self._grouped, self._starts = _group_by_class(labels, rows)
        self._test: tuple[np.ndarray, np.ndarray] | None = None
        if test_labels is not None:
            test_labels = np.asarray(test_labels).reshape(-1)
            _, grouped, starts = _group_by_class(
                test_labels, np.arange(len(test_labels), dtype=np.int64), self.classes
            )
            if len(grouped) == 0:
                raise ValueError("the test set has none of the pool's classes")
            self._test = grouped, starts

    def sizes(self, ids: np.ndarray) -> np.ndarray:
        """Log-normal sizes ``clip(round(size_median * exp(size_sigma * z)), min, max)``."""
        z = hash_normal(self.seed, self._ids(ids), _SIZE_TAG)
        with np.errstate(over="ignore"):
            n = np.rint(self.size_median * np.exp(self.size_sigma * z))
        return np.clip(n, self.size_min, self.size_max).astype(np.int64)

    def label_mix(self, client: int) -> tuple[np.random.Generator, np.ndarray]:
        """Generator of ``client`` and its label mix ``p ~ Dirichlet(alpha)`` over ``classes``.

        The generator is positioned just after the Dirichlet draw.
        """
        rng = np.random.default_rng([self.seed, _TAG, int(client)])
        return rng, rng.dirichlet(np.full(len(self.classes), self.alpha))

    def rows(self, ids: Sequence[int] | np.ndarray) -> ClientRows:
        """Training rows of each client (sorted; repeated rows possible for small classes)."""
        ids = self._ids(ids)
        out = []
        for c, n in zip(ids.tolist(), self.sizes(ids).tolist(), strict=True):
            rng, p = self.label_mix(c)
            out.append(_draw(rng, p, n, self._grouped, self._starts))
        return ClientRows(None, None, out)

    def local_test(self, fraction: float, *, seed: int) -> ClientData:
        """Per-client test data drawn from the test set with the client's own label mix.

        Client ``c`` gets ``max(1, round(fraction * n_c))`` test rows (``n_c`` its training
        size) with class counts ``~ Multinomial(., p_c)``, ``p_c`` the Dirichlet draw of its
        training data (a function of ``(self.seed, c)`` only), rows drawn from
        ``default_rng([self.seed, TEST_TAG, seed, c])``.  Classes absent from the test set
        get no test rows (the mix is renormalized over the others).  Indices refer to the
        test set; the training data is unchanged.

        Raises
        ------
        ValueError
            The source was built without ``test_labels``, or ``fraction <= 0``.
        """
        if self._test is None:
            raise ValueError("VirtualData.local_test needs the source built with test_labels")
        if not fraction > 0:
            raise ValueError(f"local test fraction must be > 0, got {fraction}")
        check_seed("seed", seed)
        grouped, starts = self._test
        return _VirtualLocalTest(self, float(fraction), int(seed), grouped, starts)

    def nbytes(self) -> int:
        arrays = [self.classes, self._grouped, self._starts, *(self._test or ())]
        return int(sum(a.nbytes for a in arrays))


class _VirtualLocalTest(ClientData):
    """Local test rows of the clients of a :class:`VirtualData` (indices into the test set)."""

    def __init__(
        self,
        parent: VirtualData,
        fraction: float,
        seed: int,
        grouped: np.ndarray,
        starts: np.ndarray,
    ) -> None:
        self.parent, self.fraction, self.seed = parent, fraction, seed
        self.num_clients = parent.num_clients
        self._grouped, self._starts = grouped, starts  # the test rows grouped by class
        self._has_rows = np.diff(self._starts) > 0

    def sizes(self, ids: np.ndarray) -> np.ndarray:
        n = self.parent.sizes(self._ids(ids))
        return np.maximum(1, np.rint(self.fraction * n)).astype(np.int64)

    def rows(self, ids: Sequence[int] | np.ndarray) -> ClientRows:
        ids = self._ids(ids)
        out = []
        for c, n in zip(ids.tolist(), self.sizes(ids).tolist(), strict=True):
            _, p = self.parent.label_mix(c)
            p = np.where(self._has_rows, p, 0.0)
            p = p / p.sum() if p.sum() > 0 else self._has_rows / self._has_rows.sum()
            rng = np.random.default_rng([self.parent.seed, _TEST_TAG, self.seed, c])
            out.append(_draw(rng, p, n, self._grouped, self._starts))
        return ClientRows(None, None, out)

    def local_test(self, fraction: float, *, seed: int) -> ClientData:
        raise ValueError("this is already a local-test source")

    def nbytes(self) -> int:
        return self.parent.nbytes() + int(self._has_rows.nbytes)
