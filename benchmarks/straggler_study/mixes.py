"""The dominant class of every virtual client's label mix at once, as
:meth:`simulator.data.virtual.VirtualData.label_mix` draws it one client at a time.

A client's mix is ``Generator(PCG64(SeedSequence([seed, TAG, c]))).dirichlet(alpha)``; this module
runs that chain over all clients as numpy arrays: SeedSequence's hash (uint32 arithmetic), PCG64's
seeding and steps (128-bit arithmetic on uint64 halves), and the Dirichlet draw as numpy's
generator makes it for 0.1 <= alpha < 1 (a standard gamma per class by Ahrens-Dieter's GS
rejection, exponentials by Marsaglia-Tsang's 256-box ziggurat). The ziggurat's tables are
computed here in float64 from the published recipe, so a gamma value may differ from numpy's in
its last bits; the dominant class (the argmax), all the study uses, is the same but for a tie
within those bits. Other alphas go through ``label_mix`` client by client.
"""

from __future__ import annotations

from typing import Any

import numpy as np

U32, U64 = np.uint32, np.uint64
M32, M64 = U64(0xFFFFFFFF), 0xFFFFFFFFFFFFFFFF
_MULT = 0x2360ED051FC65DA44385DF649FCCF645  #: PCG64's 128-bit LCG multiplier
_MHI, _MLO = U64(_MULT >> 64), U64(_MULT & M64)
#: the middle word of a virtual client's generator seed ``[seed, TAG, client]`` in
#: :mod:`simulator.data.virtual` (tests/test_stragglers_skew.py checks the mixes against it)
LABEL_MIX_TAG = 0x7C11
#: clients drawn together (arrays of a few hundred kB: cache-sized)
CHUNK = 1 << 15


def _words(n: int) -> list[int]:
    """SeedSequence's uint32 words of a non-negative int (least significant first)."""
    out = [n & 0xFFFFFFFF]
    while n > 0xFFFFFFFF:
        n >>= 32
        out.append(n & 0xFFFFFFFF)
    return out


def _seed_state(entropy: list[Any], n: int) -> list[np.ndarray]:
    """``SeedSequence(entropy).generate_state(4, uint64)`` for each of ``n`` lanes; an entry of
    ``entropy`` is an int (the same for every lane) or a uint32 array (one word per lane)."""
    words = [
        np.full(n, w, U32) for e in entropy for w in (_words(e) if isinstance(e, int) else [0])
    ]
    for i, e in enumerate(entropy):  # the per-lane word replaces its placeholder
        if not isinstance(e, int):
            at = sum(len(_words(x)) if isinstance(x, int) else 1 for x in entropy[:i])
            words[at] = e.astype(U32)
    h = [U32(0x43B0D7E5)]

    def hashmix(v: np.ndarray) -> np.ndarray:
        v = v ^ h[0]
        h[0] = U32((int(h[0]) * 0x931E8875) & 0xFFFFFFFF)
        v = v * h[0]
        return v ^ (v >> U32(16))

    def mix(x: np.ndarray, y: np.ndarray) -> np.ndarray:
        r = x * U32(0xCA01F9DD) - y * U32(0x4973F715)
        return r ^ (r >> U32(16))

    zero = np.zeros(n, U32)
    pool = [hashmix(words[i] if i < len(words) else zero) for i in range(4)]
    for s in range(4):
        for d in range(4):
            if s != d:
                pool[d] = mix(pool[d], hashmix(pool[s]))
    for s in range(4, len(words)):
        for d in range(4):
            pool[d] = mix(pool[d], hashmix(words[s]))
    hb, out = 0x8B51F9DD, []
    for i in range(8):
        v = pool[i % 4] ^ U32(hb)
        hb = (hb * 0x58F38DED) & 0xFFFFFFFF
        v = v * U32(hb)
        out.append((v ^ (v >> U32(16))).astype(U64))
    return [out[2 * k] | (out[2 * k + 1] << U64(32)) for k in range(4)]


def _mul_hi(a: np.ndarray, b: np.uint64) -> np.ndarray:
    """The high 64 bits of ``a * b`` (uint64 lanes times a constant)."""
    a0, a1, b0, b1 = a & M32, a >> U64(32), b & M32, b >> U64(32)
    p01, p10 = a0 * b1, a1 * b0
    mid = ((a0 * b0) >> U64(32)) + (p01 & M32) + (p10 & M32)
    return a1 * b1 + (p01 >> U64(32)) + (p10 >> U64(32)) + (mid >> U64(32))


class _Pcg:
    """PCG64 generators, one a lane, seeded as ``PCG64(SeedSequence(...))`` is."""

    def __init__(self, state: list[np.ndarray]) -> None:
        init_hi, init_lo, seq_hi, seq_lo = state
        self.inc_hi = (seq_hi << U64(1)) | (seq_lo >> U64(63))
        self.inc_lo = (seq_lo << U64(1)) | U64(1)
        self.hi = np.zeros_like(init_hi)
        self.lo = np.zeros_like(init_lo)
        self._step(None)
        lo = self.lo + init_lo
        self.hi = self.hi + init_hi + (lo < init_lo).astype(U64)
        self.lo = lo
        self._step(None)

    def _step(self, at: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """One LCG step of the lanes ``at`` (None: every lane)."""
        sel = slice(None) if at is None else at
        hi, lo = self.hi[sel], self.lo[sel]
        nhi = _mul_hi(lo, _MLO)
        nhi += lo * _MHI
        nhi += hi * _MLO
        nlo = lo * _MLO
        lo = nlo + self.inc_lo[sel]
        nhi += self.inc_hi[sel]
        nhi += lo < nlo
        self.hi[sel], self.lo[sel] = nhi, lo
        return nhi, lo

    def uint64(self, at: np.ndarray | None) -> np.ndarray:
        hi, lo = self._step(at)
        x, rot = hi ^ lo, hi >> U64(58)
        return (x >> rot) | (x << ((U64(64) - rot) & U64(63)))

    def double(self, at: np.ndarray | None) -> np.ndarray:
        return (self.uint64(at) >> U64(11)).astype(np.float64) * (1.0 / 9007199254740992.0)


def _ziggurat() -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """Marsaglia-Tsang's tables of the exponential ziggurat (256 boxes, 53-bit positions):
    ``ke`` (integer thresholds), ``we`` (position scales), ``fe`` (densities), and the tail's
    start ``r``."""
    r, v, m = 7.69711747013104972, 3.9496598225815571993e-3, 2.0**53
    ke, we, fe = np.zeros(256, U64), np.zeros(256), np.zeros(256)
    de = te = r
    q = v / np.exp(-de)
    ke[0], ke[1] = U64(int(de / q * m)), U64(0)
    we[0], we[255] = q / m, de / m
    fe[0], fe[255] = 1.0, np.exp(-de)
    for i in range(254, 0, -1):
        de = -np.log(v / de + np.exp(-de))
        ke[i + 1] = U64(int(de / te * m))
        te = de
        fe[i], we[i] = np.exp(-de), de / m
    return ke, we, fe, r


_KE, _WE, _FE, _R = _ziggurat()


def _exponential(g: _Pcg, at: np.ndarray | None) -> np.ndarray:
    """A standard exponential for each lane in ``at`` (None: every lane; numpy's ziggurat,
    retries included)."""
    at = np.arange(len(g.hi)) if at is None else at
    out = np.empty(len(at))
    todo = np.arange(len(at))
    first = len(at) == len(g.hi)  # every lane: no gather on the first try
    while len(todo):
        ri = g.uint64(None if first else at[todo]) >> U64(3)
        first = False
        idx = (ri & U64(0xFF)).astype(np.intp)
        ri >>= U64(8)
        x = ri.astype(np.float64) * _WE[idx]
        fast = ri < _KE[idx]
        out[todo[fast]] = x[fast]
        slow = np.flatnonzero(~fast)
        todo, idx, x = todo[slow], idx[slow], x[slow]
        if not len(todo):
            break
        u = g.double(at[todo])
        tail = idx == 0
        out[todo[tail]] = _R - np.log1p(-u[tail])
        keep = ~tail & ((_FE[idx - 1] - _FE[idx]) * u + _FE[idx] < np.exp(-x))
        out[todo[keep]] = x[keep]
        todo = todo[~tail & ~keep]
    return out


def _gamma(g: _Pcg, shape: float, n: int) -> np.ndarray:
    """A standard gamma of ``shape`` (0 < shape <= 1) for each of ``n`` lanes."""
    if shape == 1.0:
        return _exponential(g, None)
    out = np.empty(n)
    todo = np.arange(n)
    while len(todo):
        u = g.double(None if len(todo) == n else todo)
        v = _exponential(g, todo)
        low = u <= 1.0 - shape
        y = np.where(low, 0.0, -np.log(np.where(low, 0.5, (1 - u) / shape)))
        x = np.where(low, u, 1.0 - shape + shape * y) ** (1.0 / shape)
        ok = x <= v + y
        out[todo[ok]] = x[ok]
        todo = todo[~ok]
    return out


def dominant_classes(clients: Any) -> np.ndarray:
    """``argmax(clients.label_mix(c)[1])`` for every client ``c`` of a
    :class:`~simulator.data.virtual.VirtualData` source, as int64 (vectorised for
    ``0.1 <= alpha <= 1``; one ``label_mix`` call a client otherwise)."""
    n, k, alpha = clients.num_clients, len(clients.classes), clients.alpha
    if not 0.1 <= alpha <= 1.0 or n >= 2**32:
        mixes = (int(np.argmax(clients.label_mix(c)[1])) for c in range(n))
        return np.fromiter(mixes, np.int64, n)
    best = np.zeros(n, np.int64)
    for lo in range(0, n, CHUNK):  # lanes a chunk at a time: its arrays stay in the cache
        ids = np.arange(lo, min(n, lo + CHUNK), dtype=U32)
        g = _Pcg(_seed_state([clients.seed, LABEL_MIX_TAG, ids], len(ids)))
        top = np.full(len(ids), -1.0)
        for j in range(k):
            x = _gamma(g, alpha, len(ids))
            more = x > top  # argmax: the first of equal maxima, as np.argmax
            best[lo + np.flatnonzero(more)], top[more] = j, x[more]
    return best
