"""Computations whose bits do not depend on how many clients are mapped beside one.

torch's CPU kernels run an elementwise function over a tensor's memory in SIMD vectors of 8 or 16
floats, two at a time, and the few entries left at the end through the scalar code. The two
round transcendental functions (exp, log1p, softplus and their gradients) differently in the
last bit. Under ``vmap`` a client's small per-sample tensor (``[B]``, ``[B, C]``) is one piece of
a ``[K, ...]`` tensor, so whether its entries fall in the vectors or in the scalar tail depends
on K, the chunk's size, and so on the number of actors: found on MOON's per-row softplus, where
a client's gradient differed by up to 2e-9 between a chunk of 5 clients and one of 3.

:func:`lane_aligned` pads each client's entries to a multiple of :data:`LANES` before the
function, so every client's entries start a vector and none falls in the tail.

A client alone in its chunk trains unmapped (or mapped as a chunk of one) while the others of
a chunk share one mapped computation, and the placement's chunks follow the number of actors.
Two kernels chose their algorithm by shape there, and :data:`ALONE` (set by the trainer's
drivers) lets the layers compute as a chunk does:

- :func:`chunk_linear` / :class:`ChunkLinear`: MKL computes a plain product of 20 or more rows
  by a wide matrix with other kernels than the batched product ``vmap`` makes; alone, a batch of
  one product.
- :class:`ChunkConv2d`: under ``vmap`` a chunk's convolution is one grouped convolution, and on
  this project's AVX-512 machine oneDNN computes a one-channel convolution with its AVX-512
  kernel plain and its AVX2 forward and a GEMM weight gradient grouped (a CNN client alone
  differed by up to 3e-8 after two epochs; every grouped count from 2 to 200 agreed). Alone, the
  bias is added after the convolution, and where :func:`plain_is_grouped` finds this machine's
  plain kernels to round otherwise, the convolution runs beside a zero twin as a group of two.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
from collections.abc import Callable, Iterator

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

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


#: True while a chunk of one client trains (the sequential driver, or ``vmap`` over one client)
ALONE: contextvars.ContextVar[bool] = contextvars.ContextVar("fedsentry_alone", default=False)


@contextlib.contextmanager
def alone(flag: bool = True) -> Iterator[None]:
    """Set :data:`ALONE` to ``flag`` for the block (the drivers' lone clients)."""
    token = ALONE.set(flag)
    try:
        yield
    finally:
        ALONE.reset(token)


def _lone_conv(
    x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, conv: tuple, twin: bool
) -> torch.Tensor:
    """The convolution of ``x`` by ``w``, with ``twin`` as the first group of two beside a zero
    twin; the bias added after it, as ``vmap``'s rule for a mapped bias adds it."""
    if twin:
        x = torch.cat([x, torch.zeros_like(x)], dim=-3)
        out = F.conv2d(x, torch.cat([w, torch.zeros_like(w)]), None, *conv, 2)
        out = out.narrow(-3, 0, w.shape[0])
    else:
        out = F.conv2d(x, w, None, *conv)
    return out if b is None else out + b.reshape(-1, 1, 1)


def _with_gradients(
    fn: Callable[..., torch.Tensor], leaves: list[torch.Tensor]
) -> list[torch.Tensor]:
    """``fn(*leaves)`` and its gradients for a fixed random output gradient: by autograd, or,
    inside vmap (a chunk of one mapped), where autograd's ``requires_grad_`` is refused, by
    torch.func's vjp (whose first call in a process takes ~1 s)."""
    gen = np.random.default_rng(1)
    try:
        ins = [t.clone().requires_grad_(True) for t in leaves]
    except RuntimeError:
        out, back = torch.func.vjp(fn, *leaves)
        g = torch.from_numpy(gen.standard_normal(tuple(out.shape), dtype=np.float32))
        return [out, *back(g)]
    with torch.enable_grad():
        out = fn(*ins)
        g = torch.from_numpy(gen.standard_normal(tuple(out.shape), dtype=np.float32))
        # a scalar's gradient (grad_outputs would import torch.fx's symbolic shapes: 0.4 s)
        return [out.detach(), *torch.autograd.grad((out * g).sum(), ins)]


@functools.lru_cache(maxsize=256)
def plain_is_grouped(
    shape: tuple[int, ...], weight: tuple[int, ...], bias: bool, conv: tuple, threads: int
) -> bool:
    """Whether this machine's plain convolution of these shapes (input, weight; stride, padding,
    dilation ``conv``; on ``threads`` intra-op threads) gives the same bits as the grouped one
    beside a zero twin, forward and backward (input, weight and bias gradients), on random
    data: then a lone client needs no twin. Decided once per shape in a process (a few
    milliseconds)."""
    rng = np.random.default_rng(0)  # numpy's draws: vmap refuses torch's random ops
    sizes = [shape, weight] + ([(weight[0],)] if bias else [])
    leaves = [torch.from_numpy(rng.standard_normal(n, dtype=np.float32)) for n in sizes]
    results = []
    for twin in (False, True):

        def conv_of(*ins: torch.Tensor, twin: bool = twin) -> torch.Tensor:
            return _lone_conv(ins[0], ins[1], ins[2] if bias else None, conv, twin)

        results.append(_with_gradients(conv_of, leaves))
    return all(torch.equal(a, b) for a, b in zip(*results, strict=True))


def chunk_linear(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
    """``F.linear(x, w, b)`` with the same bits for a client alone (:data:`ALONE`) as in a
    chunk: there, a batched product. MKL computes a plain product of 20 or more rows by a wide
    matrix (784 x 16) with other kernels than the batched one ``vmap`` makes of it, and rounds
    the forward otherwise (the gradients agree), so a client trained alone with
    ``--batch-size 32`` differed from the same client in a chunk; as a batch of one product it
    does not."""
    if not ALONE.get() or x.dim() < 2:
        return F.linear(x, w, b)
    rows = x.reshape(1, -1, x.shape[-1])
    out = torch.matmul(rows, w.t().unsqueeze(0)).reshape(*x.shape[:-1], w.shape[0])
    return out if b is None else out + b


class ChunkLinear(nn.Linear):
    """:class:`nn.Linear` computed by :func:`chunk_linear`: the same bits for a client alone as
    in a chunk. Parameters, names and state are those of :class:`nn.Linear`."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return chunk_linear(input, self.weight, self.bias)


class ChunkConv2d(nn.Conv2d):
    """:class:`nn.Conv2d` whose result is the same bits for a client alone as in a chunk.

    In a chunk of two or more (``vmap``), a convolution runs grouped, one group per client.
    Alone (:data:`ALONE`), its bias is added after the convolution, as ``vmap`` adds a mapped
    bias (oneDNN's own bias gradient rounds otherwise), and it runs grouped too, beside a zero
    twin (twice the input channels, a zero second weight, ``groups=2``, the first group's
    output kept), unless this machine's plain kernels give the same bits for its shapes
    (:func:`plain_is_grouped`; on this project's machine only the one-channel first
    convolution needs the twin). Parameters, names and state are those of :class:`nn.Conv2d`.
    """

    def _conv_forward(
        self, input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None
    ) -> torch.Tensor:
        if not ALONE.get() or self.groups != 1 or self.padding_mode != "zeros":
            return super()._conv_forward(input, weight, bias)
        conv = (tuple(self.stride), tuple(self.padding), tuple(self.dilation))
        key = (tuple(input.shape), tuple(weight.shape), bias is not None, conv)
        twin = not plain_is_grouped(*key, torch.get_num_threads())
        return _lone_conv(input, weight, bias, conv, twin)
