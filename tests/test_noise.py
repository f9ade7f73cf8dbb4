"""Per-client noise streams (simulator/training/noise.py): standard normals, one stream per client,
prefix-stable, independent of which clients share the call."""

from __future__ import annotations

import numpy as np
import torch
from scipy import stats

from simulator.training.noise import client_noise

CPU = torch.device("cpu")


def test_draws_are_standard_normal_per_client() -> None:
    """50,000 draws for each of 3 clients (seeds beyond int64 and negative ones included):
    mean within 0.02 of 0 (4.5 standard errors), std within 0.01 of 1, Kolmogorov-Smirnov
    p > 0.01 against N(0, 1), no draw beyond the 24-bit bound sqrt(50 ln 2) = 5.89."""
    z = client_noise([3, 2**63 + 5, -7], 50, 1000, CPU).numpy()
    assert z.shape == (3, 50, 1000) and z.dtype == np.float32
    for row in z.reshape(3, -1):
        assert abs(row.mean()) < 0.02 and abs(row.std() - 1.0) < 0.01
        assert stats.kstest(row, "norm").pvalue > 0.01
        assert np.abs(row).max() <= np.sqrt(50 * np.log(2))
    # clients' streams, and the two halves of a Box-Muller pair, are uncorrelated
    flat = z.reshape(3, -1)
    assert abs(np.corrcoef(flat[0], flat[1])[0, 1]) < 0.02
    assert abs(np.corrcoef(flat[0][::2], flat[0][1::2])[0, 1]) < 0.02


def test_a_clients_stream_ignores_the_others_and_the_layout() -> None:
    """Client 5's draws are the same alone or beside others, in any order, and position
    ``(step, j)`` of a ``[S, size]`` layout is element ``step * size + j`` of one stream (an odd
    size splits a Box-Muller pair across steps)."""
    both = client_noise([6, 5], 3, 5, CPU)
    alone = client_noise([5], 3, 5, CPU)
    torch.testing.assert_close(both[1], alone[0], rtol=0, atol=0)
    flat = client_noise([5], 1, 15, CPU).reshape(-1)
    torch.testing.assert_close(alone.reshape(-1), flat, rtol=0, atol=0)
    assert client_noise([], 2, 4, CPU).shape == (0, 2, 4)
    assert client_noise([5], 0, 4, CPU).shape == (1, 1, 4)
