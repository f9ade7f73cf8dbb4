"""The splitmix64 mixing step behind every pure, vectorized random draw in FedSentry (device
profiles, virtual clients' data, per-client noise): a draw is a hash of (seed, tag, id), so it
needs no generator state and costs the same for any population size."""

from __future__ import annotations

import numpy as np


def mix64(z: np.ndarray) -> np.ndarray:
    """One splitmix64 step on uint64 values (add the golden gamma, then the finalizer;
    wrapping arithmetic)."""
    with np.errstate(over="ignore"):
        z = z + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))
