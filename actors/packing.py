"""Whether a pool's actors can be packed onto a cluster's nodes (multi-resource bin packing).

Totals that fit do not prove that a pool can start: three actors of 2 CPUs fit in the 6 CPUs of
two 3-CPU nodes, yet no node holds two of them, and the third would wait forever for a place.
:func:`packable` decides it exactly for the pool sizes this simulator runs: a depth-first
search that gives each kind (largest demand first) a count per node, with memoized states (nodes
of equal remaining capacity are interchangeable, so states are keyed on the sorted
capacities) and a bound (what the remaining nodes can still hold of the kind). A search that
exceeds its step budget answers None (undecided), and the caller lets Ray try; the pool's
start-up wait (:mod:`actors.startup`) still ends a pool that does not start.

Ray itself places actors greedily, one at a time, so a pool that *can* be packed may still be
placed badly (fragmented by fractional GPU shares, say): that, too, is left to the start-up
wait; this check only refuses what no placement could start.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

_EPS = 1e-9
#: search steps before :func:`packable` gives up (answers None)
STEP_BUDGET = 50_000


class _Undecided(Exception):
    """The search ran out of steps."""


def packable(demands: Sequence[tuple[Mapping[str, float], int]],
             nodes: Sequence[Mapping[str, float]], budget: int = STEP_BUDGET) -> bool | None:
    """Whether every actor fits on some node with the nodes' capacities respected.

    Parameters
    ----------
    demands : (one actor's resources, how many such actors) per kind.
    nodes : each node's resources (Ray's ``Resources`` of the alive nodes).
    budget : search steps before giving up.

    Returns
    -------
    True when a packing exists, False when none does, None when the search was cut short.
    """
    kinds = [({r: float(v) for r, v in d.items() if v > 0}, int(n)) for d, n in demands if n > 0]
    res = sorted({r for d, _ in kinds for r in d})
    if not kinds:
        return True
    caps = tuple(tuple(float(node.get(r, 0.0)) for r in res) for node in nodes)
    need = [tuple(d.get(r, 0.0) for r in res) for d, _ in kinds]
    counts = [n for _, n in kinds]
    # the largest demand first (relative to the cluster's totals): it has the fewest places
    totals = [max(sum(c[i] for c in caps), _EPS) for i in range(len(res))]
    order = sorted(range(len(kinds)), key=lambda k: -sum(v / t for v, t in
                                                         zip(need[k], totals, strict=True)))
    need, counts = [need[k] for k in order], [counts[k] for k in order]
    steps = [0]
    memo: dict[tuple[object, ...], bool] = {}

    def fits(cap: tuple[float, ...], k: int) -> int:
        return min((math.floor((c + _EPS) / v) for c, v in zip(cap, need[k], strict=True)
                    if v > 0), default=counts[k])

    def key(caps: tuple[tuple[float, ...], ...]) -> tuple[tuple[float, ...], ...]:
        return tuple(sorted(tuple(round(c, 6) for c in cap) for cap in caps))

    def kind(k: int, caps: tuple[tuple[float, ...], ...]) -> bool:
        if k == len(need):
            return True
        return spread(k, 0, counts[k], key(caps))

    def spread(k: int, j: int, left: int, caps: tuple[tuple[float, ...], ...]) -> bool:
        if left == 0:
            return kind(k + 1, caps)
        if j == len(caps):
            return False
        state = (k, j, left, caps)
        if state in memo:
            return memo[state]
        steps[0] += 1
        if steps[0] > budget:
            raise _Undecided
        room = [fits(c, k) for c in caps[j:]]
        ok = False
        if sum(room) >= left:
            for x in range(min(room[0], left), -1, -1):
                cap = tuple(c - x * v for c, v in zip(caps[j], need[k], strict=True))
                if spread(k, j + 1, left - x, (*caps[:j], cap, *caps[j + 1:])):
                    ok = True
                    break
        memo[state] = ok
        return ok

    try:
        return kind(0, key(caps))
    except _Undecided:
        return None
