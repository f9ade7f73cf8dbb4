"""Column-blocked float64 passes over the round's float32 rows, without a float64 copy of them.

A cohort of 1,000 rows of the CNN (114,314 parameters) is 457 MB in float32; a float64 copy is
914 MB, and making it costs more than a pass over it. A pass here reads the rows one block of
:data:`BLOCK` columns at a time and does both of the pass's products on that block while it is
in cache: first the block of the weighted mean ``z = w @ x``, then, with that block, the rows'
part of a dot product or of a squared distance. Every product and sum is float64 (each float32
entry is widened as it is read). One read of the rows from memory per pass.

The kernels are compiled with numba (cached on disk after the first call). Torch offers no
float32-in, float64-accumulate product, and widening a block with ``copy_`` before two
``torch.mv`` calls took twice as long as this pass (70 against 37 ms at 1,000 rows of the CNN
here, 2 cores): the widening copy of rows 2 KB apart was most of it.

Blocks are shared out over ``threads`` numba threads (default: torch's intra-op count). Each
block's sums are computed by one thread in a fixed order (four rows at a time for ``z``, eight
interleaved partial sums per row for the row products), stored per block and added in block
order, so a result does not depend on the number of threads.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import torch

#: columns a block: 1,000 rows x 256 float32 columns is a 1 MB block (in the L2 cache here)
BLOCK = 256


def mean_pass(
    x: torch.Tensor,
    w: torch.Tensor,
    centre: torch.Tensor | None = None,
    block: int = BLOCK,
    threads: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One pass over the CPU rows ``x`` ``[n, d]`` (float32 or float64; other float dtypes are
    widened to float32 first) with weights ``w`` ``[n]``.

    Returns
    -------
    z : torch.Tensor
        ``[d]`` float64: ``w @ x``.
    s : torch.Tensor
        ``[n]`` float64. Without ``centre``: ``||x_i - z||^2`` summed from the coordinate
        differences. With ``centre`` ``[d]``: ``x_i . (z - centre)``.
    """
    xs, part = rows_array(x, block)
    z = np.empty(xs.shape[1])
    c = np.zeros(0) if centre is None else vector(centre)
    from defenses._numba_blocked import blocked_pass

    with numba_threads(threads):
        blocked_pass(xs, vector(w), c, centre is None, block, z, part)
    return torch.from_numpy(z), torch.from_numpy(part.sum(axis=0))


def row_sq_dists(
    x: torch.Tensor, z: torch.Tensor, block: int = BLOCK, threads: int | None = None
) -> torch.Tensor:
    """``[n]`` float64: ``||x_i - z||^2`` for the CPU rows ``x`` (float32 or float64) and a
    point ``z`` ``[d]``, summed from the coordinate differences in float64, block by block (the
    same sums as :func:`mean_pass` without ``centre``, with ``z`` given); no float64 copy."""
    xs, part = rows_array(x, block)
    from defenses._numba_blocked import blocked_distances

    with numba_threads(threads):
        blocked_distances(xs, vector(z), block, part)
    return torch.from_numpy(part.sum(axis=0))


def affine_pass(
    x: torch.Tensor,
    c: torch.Tensor,
    v: torch.Tensor,
    alpha: float,
    dists: bool = True,
    block: int = BLOCK,
    threads: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """One pass over the CPU rows ``x``: ``u = alpha v + c @ x`` (``[d]`` float64) and, with
    ``dists``, ``||x_i - u||^2`` (``[n]`` float64, else None); the step of an iteration such as
    centered clipping's, fused with the distances the next step needs."""
    xs, part = rows_array(x, block)
    out = np.empty(xs.shape[1])
    from defenses._numba_blocked import affine_pass as kernel

    with numba_threads(threads):
        kernel(xs, vector(c), vector(v), float(alpha), dists, block, out, part)
    return torch.from_numpy(out), torch.from_numpy(part.sum(axis=0)) if dists else None


def rows_array(x: torch.Tensor, block: int) -> tuple[np.ndarray, np.ndarray]:
    """The kernels' view of the CPU rows (float32 or float64 as given; other float dtypes
    widened to float32) and a zeroed ``[blocks, n]`` float64 array for the per-block sums."""
    if x.dtype not in (torch.float32, torch.float64):
        x = x.float()
    xs = np.ascontiguousarray(x.detach().numpy())
    return xs, np.zeros((max(1, -(-xs.shape[1] // block)), xs.shape[0]))


def vector(t: torch.Tensor) -> np.ndarray:
    """A float64, contiguous numpy copy or view of ``t`` for the kernels."""
    return np.ascontiguousarray(t.detach().double().numpy())


@contextmanager
def numba_threads(threads: int | None = None) -> Iterator[None]:
    """Run numba kernels on ``threads`` threads (default: torch's intra-op count) in this
    thread, and restore the count after. Numba is imported here, not at module import: it
    costs 0.2 s, and most processes never run a kernel."""
    import numba

    own = numba.get_num_threads()
    numba.set_num_threads(
        max(1, min(threads or torch.get_num_threads(), numba.config.NUMBA_NUM_THREADS))
    )
    try:
        yield
    finally:
        numba.set_num_threads(own)
