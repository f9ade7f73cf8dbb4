"""``iid``: shuffle and split into near-equal parts."""

from __future__ import annotations

import numpy as np

from simulator.data.partitions import PARTITIONS


@PARTITIONS.register("iid")
def iid(
    labels: np.ndarray, num_clients: int, *, seed: int, groups: np.ndarray | None
) -> list[np.ndarray]:
    """Shuffle and split into ``num_clients`` near-equal parts."""
    rng = np.random.default_rng(seed)
    return list(np.array_split(rng.permutation(len(labels)), num_clients))
