"""Splitting a training set across federated clients, and carving out server-held data.

Feature-shift non-IID (per-client input transforms) lives in :mod:`.synthetic`.

Every function is a pure function of its arguments: randomness comes from
``np.random.default_rng(seed)``, so the same seed always yields identical index arrays.

References
----------
.. [1] B. McMahan et al., "Communication-Efficient Learning of Deep Networks from
   Decentralized Data", AISTATS 2017 (pathological non-IID "shards").
.. [2] T.-M. H. Hsu, H. Qi, M. Brown, "Measuring the Effects of Non-Identical Data
   Distribution for Federated Visual Classification", arXiv:1909.06335, 2019 (Dirichlet
   label skew).
.. [3] Q. Li, Y. Diao, Q. Chen, B. He, "Federated Learning on Non-IID Data Silos: An
   Experimental Study", ICDE 2022 (quantity skew, balanced Dirichlet sampling).
.. [4] R. Ye, Z. Ni, C. Xu, J. Wang, S. Chen, Y. Eldar, "FedFM: Anchor-Based Feature Matching
   for Data Heterogeneity in Federated Learning", IEEE TSP 2023 ("Missing k" classes; the
   paper does not say how the missing classes are chosen: here uniformly per client).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

import numpy as np

from .holdout import largest_remainder, split_public, stratified_split  # re-exported
from .synthetic import feature_shift  # re-exported: part of this module's public API

__all__ = ["PARTITIONERS", "partition", "split_public", "stratified_split", "feature_shift"]

Partitioner = Callable[..., list[np.ndarray]]


# --------------------------------------------------------------------------- schemes


def _iid(labels: np.ndarray, num_clients: int, *, rng: np.random.Generator,
         groups: np.ndarray | None) -> list[np.ndarray]:
    """Shuffle and split into ``num_clients`` near-equal parts."""
    return list(np.array_split(rng.permutation(len(labels)), num_clients))


def _dirichlet(labels: np.ndarray, num_clients: int, *, rng: np.random.Generator,
               groups: np.ndarray | None, alpha: float = 0.5, min_size: int = 1,
               max_retries: int = 100, balance: bool = True) -> list[np.ndarray]:
    """Label skew: each class is spread over clients with proportions ``~ Dir(alpha)`` [2]_.

    With ``balance`` a client already holding ``N / num_clients`` samples gets no further
    classes (the NIID-Bench sampler [3]_), which keeps sizes sane at small ``alpha``.  The
    draw is repeated until every client has ``min_size`` samples.
    """
    if alpha <= 0:
        raise ValueError(f"dirichlet alpha must be > 0, got {alpha}")
    if min_size < 1 or max_retries < 1:
        raise ValueError("dirichlet min_size and max_retries must be >= 1")
    n = len(labels)
    if n < num_clients * min_size:
        raise ValueError(f"cannot give {num_clients} clients {min_size} samples each from {n}")
    classes = np.unique(labels)
    for _ in range(max_retries):
        buckets: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
        sizes = np.zeros(num_clients, dtype=np.int64)
        for c in rng.permutation(classes):
            idx = rng.permutation(np.flatnonzero(labels == c))
            p = rng.dirichlet(np.full(num_clients, alpha))
            if balance:
                masked = p * (sizes < n / num_clients)
                p = masked / masked.sum() if masked.sum() > 0 else p
            cuts = (np.cumsum(p)[:-1] * len(idx)).astype(np.int64)
            for client, part in enumerate(np.split(idx, cuts)):
                buckets[client].append(part)
                sizes[client] += len(part)
        if sizes.min() >= min_size:
            return [np.concatenate(b) for b in buckets]
    raise ValueError(f"dirichlet(alpha={alpha}) gave some client < {min_size} samples in "
                     f"{max_retries} draws; raise alpha or max_retries, or lower min_size")


def _shards(labels: np.ndarray, num_clients: int, *, rng: np.random.Generator,
            groups: np.ndarray | None, classes_per_client: int = 2) -> list[np.ndarray]:
    """Pathological non-IID [1]_: label-sorted shards, ``classes_per_client`` per client.

    Every shard holds a single class (each class is cut into a number of shards proportional
    to its size), so a client sees at most ``classes_per_client`` classes.
    """
    k = classes_per_client
    if k < 1:
        raise ValueError(f"shards classes_per_client must be >= 1, got {k}")
    classes, inverse = np.unique(labels, return_inverse=True)
    per_class = np.bincount(inverse, minlength=len(classes))
    num_shards = num_clients * k
    if num_shards < len(classes):
        raise ValueError(f"shards needs num_clients * classes_per_client >= number of classes "
                         f"({num_clients} * {k} < {len(classes)}): single-class shards could "
                         f"not cover every sample")
    if num_shards > len(labels):
        raise ValueError(f"cannot cut {len(labels)} samples into {num_shards} shards")
    # D'Hondt allocation: each extra shard goes to the class whose shards are largest
    shard_count = np.ones(len(classes), dtype=np.int64)
    for _ in range(num_shards - len(classes)):
        ratio = np.where(shard_count < per_class, per_class / shard_count, -1.0)
        shard_count[int(np.argmax(ratio))] += 1
    shards: list[np.ndarray] = []
    for c, s in enumerate(shard_count):
        shards.extend(np.array_split(rng.permutation(np.flatnonzero(inverse == c)), s))
    order = rng.permutation(num_shards)
    return [np.concatenate([shards[j] for j in order[i * k:(i + 1) * k]])
            for i in range(num_clients)]


def _missing(labels: np.ndarray, num_clients: int, *, rng: np.random.Generator,
             groups: np.ndarray | None, missing_classes: int = 1,
             max_retries: int = 100) -> list[np.ndarray]:
    """Missing-class label skew [4]_: each client lacks exactly ``missing_classes`` classes.

    Each client's missing classes are drawn uniformly at random (redrawn until every class is
    held by some client); each class's samples are shuffled and split as evenly as possible
    among the clients that hold it.
    """
    classes, inverse = np.unique(labels, return_inverse=True)
    k, c = missing_classes, len(classes)
    if not 0 <= k < c:
        raise ValueError(f"partition 'missing': missing_classes must be in [0, {c - 1}] (the "
                         f"data has {c} classes), got {k}")
    if max_retries < 1:
        raise ValueError("partition 'missing': max_retries must be >= 1")
    for _ in range(max_retries):
        holds = np.ones((num_clients, c), dtype=bool)
        for i in range(num_clients):
            holds[i, rng.choice(c, size=k, replace=False)] = False
        if holds.any(axis=0).all():
            break
    else:
        raise ValueError(f"partition 'missing': no draw in {max_retries} left every class with "
                         f"a holder ({num_clients} clients missing {k} of {c} classes)")
    buckets: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
    for j in range(c):
        holders = np.flatnonzero(holds[:, j])
        parts = np.array_split(rng.permutation(np.flatnonzero(inverse == j)), len(holders))
        for i, part in zip(rng.permutation(holders), parts, strict=True):
            buckets[i].append(part)
    return [np.concatenate(b) for b in buckets]


def _quantity(labels: np.ndarray, num_clients: int, *, rng: np.random.Generator,
              groups: np.ndarray | None, method: str = "dirichlet", alpha: float = 1.0,
              exponent: float = 1.0, min_size: int = 1) -> list[np.ndarray]:
    """Quantity skew [3]_: IID labels, client sizes ``~ Dir(alpha)`` or a power law.

    ``method="powerlaw"`` gives the client of (random) rank r a share ``∝ r^-exponent``.
    Each client first receives ``min_size`` samples; the rest is shared by the proportions.
    """
    n = len(labels)
    if min_size < 1 or n < num_clients * min_size:
        raise ValueError(f"cannot give {num_clients} clients {min_size} (>= 1) samples each "
                         f"from {n}")
    if method == "dirichlet":
        if alpha <= 0:
            raise ValueError(f"quantity alpha must be > 0, got {alpha}")
        weights = rng.dirichlet(np.full(num_clients, alpha))
    elif method == "powerlaw":
        if exponent < 0:
            raise ValueError(f"quantity exponent must be >= 0, got {exponent}")
        weights = rng.permutation(np.arange(1, num_clients + 1, dtype=np.float64) ** -exponent)
    else:
        raise ValueError(f"quantity method must be 'dirichlet' or 'powerlaw', got {method!r}")
    sizes = min_size + largest_remainder(weights, n - num_clients * min_size)
    return list(np.split(rng.permutation(n), np.cumsum(sizes)[:-1]))


def _natural(labels: np.ndarray, num_clients: int, *, rng: np.random.Generator,
             groups: np.ndarray | None, assign: str = "sample") -> list[np.ndarray]:
    """Use natural client ids (e.g. LEAF writers, FedProx devices) as the partition.

    ``assign="sample"`` gives each client one randomly chosen group (other groups unused);
    ``assign="merge"`` deals all groups out round-robin so every sample is used.
    """
    if groups is None:
        raise ValueError("natural partition needs groups (this dataset defines none)")
    groups = np.asarray(groups)
    if groups.shape != labels.shape:
        raise ValueError(f"groups shape {groups.shape} != labels shape {labels.shape}")
    uniq = np.unique(groups)
    if len(uniq) < num_clients:
        raise ValueError(f"natural partition has {len(uniq)} groups, fewer than "
                         f"{num_clients} clients")
    chosen = rng.permutation(uniq)
    if assign == "sample":
        return [np.flatnonzero(groups == g) for g in chosen[:num_clients]]
    if assign == "merge":
        return [np.flatnonzero(np.isin(groups, chosen[i::num_clients]))
                for i in range(num_clients)]
    raise ValueError(f"natural assign must be 'sample' or 'merge', got {assign!r}")


PARTITIONERS: dict[str, Partitioner] = {
    "iid": _iid,
    "dirichlet": _dirichlet,
    "shards": _shards,
    "missing": _missing,
    "quantity": _quantity,
    "natural": _natural,
}


def _scheme_params(fn: Partitioner) -> list[str]:
    return [p.name for p in inspect.signature(fn).parameters.values()
            if p.kind is inspect.Parameter.KEYWORD_ONLY and p.name not in ("rng", "groups")]


def partition(labels: np.ndarray, num_clients: int, scheme: str, *, seed: int,
              groups: np.ndarray | None = None, **params: object) -> list[np.ndarray]:
    """Split training indices ``0..N-1`` across ``num_clients`` clients.

    Parameters
    ----------
    labels : ndarray
        Integer training labels, shape ``[N]``.
    num_clients : int
        Number of clients (>= 1).
    scheme : str
        One of ``PARTITIONERS``: ``iid``, ``dirichlet`` (alpha, min_size, max_retries,
        balance), ``shards`` (classes_per_client), ``missing`` (missing_classes,
        max_retries), ``quantity`` (method, alpha, exponent, min_size), ``natural`` (assign;
        needs ``groups``).
    seed : int
        Seed of ``np.random.default_rng``.
    groups : ndarray, optional
        Natural client id per sample, for ``natural``.
    **params
        Scheme parameters, see above.

    Returns
    -------
    list of ndarray
        One sorted int64 index array per client; arrays are disjoint and non-empty.  All
        schemes but ``natural`` with ``assign="sample"`` cover every index.

    Raises
    ------
    ValueError
        Unknown scheme or parameter (the message lists the valid ones), or an impossible
        request such as more clients than samples.
    """
    if scheme not in PARTITIONERS:
        raise ValueError(f"unknown partition scheme {scheme!r}; valid schemes: "
                         f"{', '.join(sorted(PARTITIONERS))}")
    fn = PARTITIONERS[scheme]
    valid = _scheme_params(fn)
    unknown = sorted(set(params) - set(valid))
    if unknown:
        raise ValueError(f"unknown parameter(s) {unknown} for scheme {scheme!r}; valid: "
                         f"{valid or 'none'}")
    labels = np.asarray(labels)
    if labels.ndim != 1 or not np.issubdtype(labels.dtype, np.integer):
        raise ValueError(f"labels must be a 1-D integer array, got {labels.dtype} {labels.shape}")
    if int(num_clients) != num_clients or num_clients < 1:
        raise ValueError(f"num_clients must be a positive integer, got {num_clients}")
    if len(labels) < num_clients:
        raise ValueError(f"cannot give {num_clients} clients a sample each from "
                         f"{len(labels)} samples")
    parts = fn(labels, int(num_clients), rng=np.random.default_rng(seed), groups=groups,
               **params)
    out = [np.sort(np.asarray(p, dtype=np.int64)) for p in parts]
    if any(len(p) == 0 for p in out):  # defensive: every scheme above guarantees this
        raise ValueError(f"scheme {scheme!r} left a client without samples")
    return out
