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
placed badly (a small actor on the one node a large actor fits, fractional GPU shares): so
:func:`packing` also returns the packing, and the pool pins each actor to its node
(:func:`actors.kinds.planned_nodes`, a soft node affinity). Only an undecided search leaves the
placement to Ray and the start-up wait.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

_EPS = 1e-9
#: search steps before :func:`packable` gives up (answers None)
STEP_BUDGET = 50_000


class _Undecided(Exception):
    """The search ran out of steps."""


def packing(
    demands: Sequence[tuple[Mapping[str, float], int]],
    nodes: Sequence[Mapping[str, float]],
    budget: int = STEP_BUDGET,
) -> list[list[int]] | bool | None:
    """A packing of every actor onto the nodes with their capacities respected.

    Parameters
    ----------
    demands : (one actor's resources, how many such actors) per kind.
    nodes : each node's resources (Ray's ``Resources`` of the alive nodes).
    budget : search steps before giving up.

    Returns
    -------
    ``counts[kind][node]``, how many actors of each kind (in ``demands`` order) each node (in
    ``nodes`` order) holds, when a packing exists; False when none does; None when the search
    was cut short.
    """
    given = [({r: float(v) for r, v in d.items() if v > 0}, int(n)) for d, n in demands]
    live = [i for i, (_, n) in enumerate(given) if n > 0]
    out = [[0] * len(nodes) for _ in given]
    if not live:
        return out
    kinds = [given[i] for i in live]
    res = sorted({r for d, _ in kinds for r in d})
    caps = tuple(tuple(float(node.get(r, 0.0)) for r in res) for node in nodes)
    need = [tuple(d.get(r, 0.0) for r in res) for d, _ in kinds]
    counts = [n for _, n in kinds]
    # the largest demand first (relative to the cluster's totals): it has the fewest places
    totals = [max(sum(c[i] for c in caps), _EPS) for i in range(len(res))]
    order = sorted(
        range(len(kinds)), key=lambda k: -sum(v / t for v, t in zip(need[k], totals, strict=True))
    )
    search = _Search([need[k] for k in order], [counts[k] for k in order], budget)
    try:
        found = search.kind(0, tuple((cap, i) for i, cap in enumerate(caps)))
    except _Undecided:
        return None
    if not found:
        return False
    for k, node, x in search.chosen:
        out[live[order[k]]][node] += x
    return out


#: (capacity left, node index) per node
_State = tuple[tuple[tuple[float, ...], int], ...]


class _Search:
    """The depth-first search of :func:`packing`: kinds in order, each kind's actors spread
    over the nodes (most on the first node first), failures memoized on the capacities left."""

    def __init__(self, need: list[tuple[float, ...]], counts: list[int], budget: int) -> None:
        self.need, self.counts, self.budget = need, counts, budget
        self.steps = 0
        self.memo: dict[tuple[object, ...], bool] = {}
        self.chosen: list[tuple[int, int, int]] = []  # (kind in search order, node, actors)

    def fits(self, cap: tuple[float, ...], k: int) -> int:
        """How many actors of kind ``k`` fit in ``cap``."""
        return min(
            (math.floor((c + _EPS) / v) for c, v in zip(cap, self.need[k], strict=True) if v > 0),
            default=self.counts[k],
        )

    @staticmethod
    def canonical(state: _State) -> _State:
        """Nodes of equal remaining capacity are interchangeable: one order for all of them."""
        return tuple(sorted(state, key=lambda cn: tuple(round(c, 6) for c in cn[0])))

    def kind(self, k: int, state: _State) -> bool:
        """Whether kinds ``k`` and after can be placed in ``state``."""
        if k == len(self.need):
            return True
        return self.spread(k, 0, self.counts[k], self.canonical(state))

    def spread(self, k: int, j: int, left: int, state: _State) -> bool:
        """Whether ``left`` actors of kind ``k`` fit on nodes ``j`` and after (then the rest)."""
        if left == 0:
            return self.kind(k + 1, state)
        if j == len(state):
            return False
        memo_key = (k, j, left, tuple(tuple(round(c, 6) for c in cap) for cap, _ in state))
        if memo_key in self.memo:  # only failures are ever looked up: a success ends the search
            return self.memo[memo_key]
        self.steps += 1
        if self.steps > self.budget:
            raise _Undecided
        room = [self.fits(cap, k) for cap, _ in state[j:]]
        ok = False
        if sum(room) >= left:
            cap_j, node = state[j]
            for x in range(min(room[0], left), -1, -1):
                cap = tuple(c - x * v for c, v in zip(cap_j, self.need[k], strict=True))
                if self.spread(k, j + 1, left - x, (*state[:j], (cap, node), *state[j + 1 :])):
                    if x:
                        self.chosen.append((k, node, x))
                    ok = True
                    break
        self.memo[memo_key] = ok
        return ok


def packable(
    demands: Sequence[tuple[Mapping[str, float], int]],
    nodes: Sequence[Mapping[str, float]],
    budget: int = STEP_BUDGET,
) -> bool | None:
    """Whether every actor fits on some node (see :func:`packing`): True, False, or None when
    the search was cut short."""
    found = packing(demands, nodes, budget)
    return found if found is None or isinstance(found, bool) else True
