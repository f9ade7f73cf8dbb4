"""``quantity``: quantity skew with IID labels.

References
----------
.. [1] Q. Li, Y. Diao, Q. Chen, B. He, "Federated Learning on Non-IID Data Silos: An
   Experimental Study", ICDE 2022.
"""

from __future__ import annotations

import numpy as np

from simulator.data.holdout import largest_remainder
from simulator.data.partitions import PARTITIONS


@PARTITIONS.register("quantity")
def quantity(
    labels: np.ndarray,
    num_clients: int,
    *,
    seed: int,
    groups: np.ndarray | None,
    method: str = "dirichlet",
    alpha: float = 1.0,
    exponent: float = 1.0,
    min_size: int = 1,
) -> list[np.ndarray]:
    """Quantity skew [1]_: IID labels, client sizes ``~ Dir(alpha)`` or a power law.

    ``method="powerlaw"`` gives the client of (random) rank r a share ``∝ r^-exponent``.
    Each client first receives ``min_size`` samples; the rest is shared by the proportions.
    """
    rng = np.random.default_rng(seed)
    n = len(labels)
    if min_size < 1 or n < num_clients * min_size:
        raise ValueError(
            f"cannot give {num_clients} clients {min_size} (>= 1) samples each from {n}"
        )
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
