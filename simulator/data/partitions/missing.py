"""``missing``: each client lacks some classes.

References
----------
.. [1] R. Ye, Z. Ni, C. Xu, J. Wang, S. Chen, Y. Eldar, "FedFM: Anchor-Based Feature Matching
   for Data Heterogeneity in Federated Learning", IEEE TSP 2023 (the paper does not say how
   the missing classes are chosen: here uniformly per client).
"""

from __future__ import annotations

import numpy as np

from simulator.data.partitions import PARTITIONS


@PARTITIONS.register("missing")
def missing(
    labels: np.ndarray,
    num_clients: int,
    *,
    seed: int,
    groups: np.ndarray | None,
    missing_classes: int = 1,
    max_retries: int = 100,
) -> list[np.ndarray]:
    """Missing-class label skew [1]_: each client lacks exactly ``missing_classes`` classes.

    Each client's missing classes are drawn uniformly at random (redrawn until every class is
    held by some client); each class's samples are shuffled and split as evenly as possible
    among the clients that hold it.
    """
    rng = np.random.default_rng(seed)
    classes, inverse = np.unique(labels, return_inverse=True)
    k, c = missing_classes, len(classes)
    if not 0 <= k < c:
        raise ValueError(
            f"partition 'missing': missing_classes must be in [0, {c - 1}] (the "
            f"data has {c} classes), got {k}"
        )
    if max_retries < 1:
        raise ValueError("partition 'missing': max_retries must be >= 1")
    for _ in range(max_retries):
        holds = np.ones((num_clients, c), dtype=bool)
        for i in range(num_clients):
            holds[i, rng.choice(c, size=k, replace=False)] = False
        if holds.any(axis=0).all():
            break
    else:
        raise ValueError(
            f"partition 'missing': no draw in {max_retries} left every class with "
            f"a holder ({num_clients} clients missing {k} of {c} classes)"
        )
    buckets: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
    for j in range(c):
        holders = np.flatnonzero(holds[:, j])
        parts = np.array_split(rng.permutation(np.flatnonzero(inverse == j)), len(holders))
        for i, part in zip(rng.permutation(holders), parts, strict=True):
            buckets[i].append(part)
    return [np.concatenate(b) for b in buckets]
