"""Elementwise functions whose bits do not depend on how many clients are mapped beside one.

torch's CPU kernels run an elementwise function over a tensor's memory in SIMD vectors of 8 or 16
floats, two at a time, and the few entries left at the end through the scalar code. The two
round transcendental functions (exp, log1p, softplus and their gradients) differently in the
last bit. Under ``vmap`` a client's small per-sample tensor (``[B]``, ``[B, C]``) is one piece of
a ``[K, ...]`` tensor, so whether its entries fall in the vectors or in the scalar tail depends
on K, the chunk's size, and so on the number of actors: found on MOON's per-row softplus, where
a client's gradient differed by up to 2e-9 between a chunk of 5 clients and one of 3.

:func:`lane_aligned` pads each client's entries to a multiple of :data:`LANES` before the
function, so every client's entries start a vector and none falls in the tail.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

#: a multiple of two vectors of every SIMD width torch's CPU kernels use (AVX2: 8 floats,
#: AVX-512: 16): a client's padded entries fill whole vectors, and so does the mapped tensor
LANES = 64


def lane_aligned(fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """``fn(x)`` for an elementwise ``fn``, computed on ``x`` padded to a multiple of
    :data:`LANES` entries, so that the result (and its gradient) is the same bits whether the
    client is trained alone, unmapped, or mapped beside any number of others.

    Parameters
    ----------
    fn : an elementwise function (``F.softplus``, ``torch.exp``, ...).
    x : one client's tensor (inside ``vmap``: its slice).

    Returns
    -------
    ``fn(x)``, shaped like ``x``.
    """
    n = x.numel()
    flat = F.pad(x.reshape(-1), (0, (-n) % LANES))
    return fn(flat)[:n].reshape(x.shape)
