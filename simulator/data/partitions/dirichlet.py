"""``dirichlet``: Dirichlet label skew.

References
----------
.. [1] T.-M. H. Hsu, H. Qi, M. Brown, "Measuring the Effects of Non-Identical Data
   Distribution for Federated Visual Classification", arXiv:1909.06335, 2019.
.. [2] Q. Li, Y. Diao, Q. Chen, B. He, "Federated Learning on Non-IID Data Silos: An
   Experimental Study", ICDE 2022 (balanced Dirichlet sampling).
"""

from __future__ import annotations

import numpy as np

from simulator.data.partitions import PARTITIONS


@PARTITIONS.register("dirichlet")
def dirichlet(
    labels: np.ndarray,
    num_clients: int,
    *,
    seed: int,
    groups: np.ndarray | None,
    alpha: float = 0.5,
    min_size: int = 1,
    max_retries: int = 100,
    balance: bool = True,
) -> list[np.ndarray]:
    """Label skew: each class is spread over clients with proportions ``~ Dir(alpha)`` [1]_.

    With ``balance`` a client already holding ``N / num_clients`` samples gets no further
    classes (the NIID-Bench sampler [2]_), which keeps sizes sane at small ``alpha``.  The
    draw is repeated until every client has ``min_size`` samples.
    """
    rng = np.random.default_rng(seed)
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
    raise ValueError(
        f"dirichlet(alpha={alpha}) gave some client < {min_size} samples in "
        f"{max_retries} draws; raise alpha or max_retries, or lower min_size"
    )
