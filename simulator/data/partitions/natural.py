"""``natural``: the data's own clients (LEAF writers, FedProx devices)."""

from __future__ import annotations

import numpy as np

from simulator.data.partitions import PARTITIONS


@PARTITIONS.register("natural")
def natural(
    labels: np.ndarray,
    num_clients: int,
    *,
    seed: int,
    groups: np.ndarray | None,
    assign: str = "sample",
) -> list[np.ndarray]:
    """Use natural client ids (e.g. LEAF writers, FedProx devices) as the partition.

    ``assign="sample"`` gives each client one randomly chosen group (other groups unused);
    ``assign="merge"`` deals all groups out round-robin so every sample is used.
    """
    rng = np.random.default_rng(seed)
    if groups is None:
        raise ValueError("natural partition needs groups (this dataset defines none)")
    groups = np.asarray(groups)
    if groups.shape != labels.shape:
        raise ValueError(f"groups shape {groups.shape} != labels shape {labels.shape}")
    uniq = np.unique(groups)
    if len(uniq) < num_clients:
        raise ValueError(
            f"natural partition has {len(uniq)} groups, fewer than {num_clients} clients"
        )
    chosen = rng.permutation(uniq)
    if assign == "sample":
        return [np.flatnonzero(groups == g) for g in chosen[:num_clients]]
    if assign == "merge":
        return [np.flatnonzero(np.isin(groups, chosen[i::num_clients])) for i in range(num_clients)]
    raise ValueError(f"natural assign must be 'sample' or 'merge', got {assign!r}")
