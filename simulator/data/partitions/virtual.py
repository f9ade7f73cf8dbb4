"""``virtual``: each client a seeded draw from the pool (log-normal size, ``Dir(alpha)`` label
mix), made when the client is selected.

A run of any population size draws its clients on demand
(:class:`~simulator.data.virtual.VirtualData`, which defines the draws); this scheme lists the
same clients for a population no larger than the pool: client ``c`` of
``partition(labels, n, "virtual", seed=s, ...)`` holds the rows ``VirtualData(labels, n,
seed=s, ...)`` gives it. Rows may repeat within and across clients.
"""

from __future__ import annotations

import numpy as np

from simulator.data.partitions import PARTITIONS
from simulator.data.virtual import VirtualData


@PARTITIONS.register("virtual")
def virtual(
    labels: np.ndarray,
    num_clients: int,
    *,
    seed: int,
    groups: np.ndarray | None,
    alpha: float = 0.5,
    size_median: float = 32.0,
    size_sigma: float = 0.6,
    size_min: int = 4,
    size_max: int = 512,
) -> list[np.ndarray]:
    """The rows of virtual clients ``0..num_clients-1`` (parameters as
    :class:`~simulator.data.virtual.VirtualData`: the label mix's Dirichlet ``alpha``, the
    log-normal size's median and sigma, clipped to ``[size_min, size_max]``)."""
    source = VirtualData(
        labels,
        num_clients,
        seed=seed,
        alpha=alpha,
        size_median=size_median,
        size_sigma=size_sigma,
        size_min=size_min,
        size_max=size_max,
    )
    return source.rows(np.arange(num_clients)).index
