"""Sort and chunk: the greedy per-actor pass of the scheduler, and the chunk cost it minimizes.

An actor trains its clients in stacked (vmapped) chunks. A chunk takes as many SGD steps as its
longest client (shorter clients are padded and masked), and each step costs a fixed dispatch part
plus a part growing with the clients in the chunk. So an actor's time depends on how its clients
are grouped: one chunk of everything pays the longest schedule for every client; many small
chunks pay the dispatch part many times. The pass sorts an actor's tasks by local steps (longest
first) and cuts the sorted list into contiguous chunks, choosing the cuts by dynamic programming
on a chunk cost model (:class:`ChunkCost`: a learned predictor, or a prior before any chunk was
observed). Cutting a sorted list contiguously loses nothing against other groupings of equal
chunk sizes, since a chunk's cost grows with its longest member.

:func:`bands` applies the same pass to a whole round (with each chunk's clients shared among the
actors), giving step bands; :func:`band_table` tabulates the cost of a chunk of ``c`` clients of a
band on each actor kind, which makes the genetic search's fitness a table lookup
(:mod:`simulator.scheduler.chunk_ga`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from simulator.scheduler.predictor import FEATURES, PREDICTORS

#: chunk cost models: a learned predictor, or the fixed prior alone
COST_MODELS = ("gbdt", "linear", "prior")
MAX_CUTS = 32  # candidate cut positions per DP (quantiles of the sorted list beyond that)


def task_steps(samples: Sequence[int], epochs: Sequence[int], batch_size: int) -> np.ndarray:
    """Local SGD steps of each task: ``epochs * ceil(samples / batch_size)`` (as the trainer's
    schedule, :func:`simulator.training.spec.make_schedule`)."""
    n = np.maximum(np.asarray(samples, np.int64), 0)
    return np.asarray(epochs, np.int64) * (-(-n // int(batch_size)))


def chunk_features(steps: np.ndarray, samples: np.ndarray, flops: float, kind: int) -> np.ndarray:
    """``[1, len(FEATURES)]`` features of one chunk holding tasks with these steps/samples."""
    return np.array(
        [[len(steps), steps.max(initial=0), steps.sum(), samples.sum(), flops, kind]], np.float64
    )


@dataclass
class ChunkCost:
    """Predicted seconds of a chunk on an actor kind.

    Before the predictor has observed any chunk it answers with a prior (``prior``):
    ``max_steps * (1 ms + clients * batch * 3 * flops / 1e10)``, a guess of a 10 GFLOP/s core
    with a millisecond of dispatch per step; it only needs to order choices until the first
    round's chunks are observed.

    Parameters
    ----------
    flops : training FLOPs of one sample's forward pass (the model's).
    batch_size : the clients' batch size.
    predictor : ``"gbdt"`` or ``"linear"`` (:data:`PREDICTORS`), or ``"prior"`` (never learns:
        placements then depend on the seed only, not on measured times).
    seed : the predictor's seed.
    """

    flops: float
    batch_size: int
    predictor: str = "gbdt"
    seed: int = 0

    def __post_init__(self) -> None:
        if self.predictor not in COST_MODELS:
            raise ValueError(f"predictor: unknown {self.predictor!r}; valid: {COST_MODELS}")
        # "prior" never learns: schedules then depend on the seed only (bitwise reproducible)
        self.learns = self.predictor != "prior"
        self.model = (
            PREDICTORS["gbdt"](seed=self.seed)
            if self.predictor in ("gbdt", "prior")
            else PREDICTORS[self.predictor]()
        )
        self._pending: list[tuple[np.ndarray, np.ndarray]] = []

    @property
    def observed(self) -> int:
        """Chunks observed so far (learned from or waiting for the next refit)."""
        return len(self.model.y) + sum(len(s) for _, s in self._pending)

    def observe(self, x: np.ndarray, seconds: np.ndarray) -> None:
        """Learn from observed chunks. New chunks reach the model once the observations have
        grown by a quarter since its last fit, so a run refits O(log chunks) times."""
        if not self.learns:
            return
        self._pending.append(
            (
                np.asarray(x, np.float64).reshape(-1, len(FEATURES)),
                np.asarray(seconds, np.float64).reshape(-1),
            )
        )
        if self.observed >= 1.25 * len(self.model.y):
            self.model.observe(
                np.concatenate([p[0] for p in self._pending]),
                np.concatenate([p[1] for p in self._pending]),
            )
            self._pending = []

    def state_dict(self) -> dict[str, np.ndarray]:
        """Every observation (for checkpoints)."""
        st = self.model.state_dict()
        for px, py in self._pending:
            st["x"], st["y"] = np.concatenate([st["x"], px]), np.concatenate([st["y"], py])
        return st

    def load_state_dict(self, st: dict[str, np.ndarray]) -> None:
        self.model.load_state_dict(st)
        self._pending = []

    def __call__(self, x: np.ndarray) -> np.ndarray:
        """Predicted seconds of chunks ``x`` (rows of :data:`FEATURES`)."""
        x = np.asarray(x, np.float64).reshape(-1, len(FEATURES))
        if not len(self.model.y):
            c, s = x[:, 0], x[:, 1]
            return s * (1e-3 + c * self.batch_size * 3.0 * self.flops / 1e10)
        return self.model.predict(x)


def _cut_candidates(steps_sorted: np.ndarray) -> np.ndarray:
    """Positions (1..n-1) where a chunk may end: where the step count changes, thinned to at
    most :data:`MAX_CUTS` by quantile."""
    n = len(steps_sorted)
    pos = np.flatnonzero(np.diff(steps_sorted) != 0) + 1
    if len(pos) > MAX_CUTS:
        pos = pos[np.unique(np.linspace(0, len(pos) - 1, MAX_CUTS).round().astype(np.int64))]
    return np.concatenate([[0], pos, [n]]).astype(np.int64)


def sort_and_chunk(
    steps: np.ndarray, samples: np.ndarray, cost: ChunkCost, kind: int = 0, share: float = 1.0
) -> tuple[np.ndarray, list[int], float]:
    """Order and cut one actor's tasks into chunks of least predicted total time.

    Parameters
    ----------
    steps, samples : per task local steps and samples.
    cost : the chunk cost model.
    kind : the actor kind's code (a predictor feature).
    share : scale a chunk's clients, steps and samples by this (``1/m``: each of ``m`` actors
        gets that share of every chunk, as :func:`bands` assumes).

    Returns
    -------
    order : task positions, longest first (ties: lower position first).
    sizes : chunk sizes along ``order``.
    seconds : the predicted time (sum over chunks, at ``share`` scale).
    """
    steps, samples = np.asarray(steps, np.int64), np.asarray(samples, np.int64)
    n = len(steps)
    if n == 0:
        return np.zeros(0, np.int64), [], 0.0
    order = np.lexsort((np.arange(n), -steps))
    s, m = steps[order], samples[order]
    cuts = _cut_candidates(s)
    cs, cm = np.concatenate([[0], np.cumsum(s)]), np.concatenate([[0], np.cumsum(m)])
    i, j = np.triu_indices(len(cuts), k=1)  # chunk = sorted positions cuts[i]:cuts[j]
    a, b = cuts[i], cuts[j]
    x = np.stack(
        [
            (b - a) * share,
            s[a],
            (cs[b] - cs[a]) * share,
            (cm[b] - cm[a]) * share,
            np.full(len(a), cost.flops),
            np.full(len(a), kind),
        ],
        axis=1,
    ).astype(np.float64)
    seg = dict(zip(zip(i.tolist(), j.tolist(), strict=True), cost(x).tolist(), strict=True))
    best = np.full(len(cuts), np.inf)
    best[0], back = 0.0, np.zeros(len(cuts), np.int64)
    for jj in range(1, len(cuts)):
        for ii in range(jj):
            v = best[ii] + seg[(ii, jj)]
            if v < best[jj]:
                best[jj], back[jj] = v, ii
    sizes, jj = [], len(cuts) - 1
    while jj > 0:
        sizes.append(int(cuts[jj] - cuts[back[jj]]))
        jj = int(back[jj])
    return order, sizes[::-1], float(best[-1])


def bands(
    steps: np.ndarray, samples: np.ndarray, cost: ChunkCost, kind: int, actors: int
) -> np.ndarray:
    """Band of every task: the chunks of :func:`sort_and_chunk` over the whole round with each
    chunk shared among ``actors`` actors (``band[i]`` = 0 for the longest tasks' chunk)."""
    order, sizes, _ = sort_and_chunk(steps, samples, cost, kind, share=1.0 / max(actors, 1))
    band = np.zeros(len(steps), np.int64)
    band[order] = np.repeat(np.arange(len(sizes)), sizes)
    return band


def band_table(
    steps: np.ndarray, samples: np.ndarray, band: np.ndarray, cost: ChunkCost, kinds: Sequence[int]
) -> np.ndarray:
    """``T[k, b, c]``: predicted seconds of a chunk of ``c`` clients of band ``b`` on kind
    ``kinds[k]`` (longest steps = the band's longest; steps and samples = ``c`` times the band's
    means; ``T[..., 0] = 0``)."""
    nb = int(band.max()) + 1 if len(band) else 0
    count = np.bincount(band, minlength=nb)
    top = np.array([steps[band == b].max() for b in range(nb)], np.float64)
    ms = np.bincount(band, weights=steps, minlength=nb) / np.maximum(count, 1)
    mm = np.bincount(band, weights=samples, minlength=nb) / np.maximum(count, 1)
    width = int(count.max(initial=0))
    table = np.zeros((len(kinds), nb, width + 1))
    b, c = np.nonzero(np.arange(width + 1)[None, :] <= count[:, None])
    keep = c > 0
    b, c = b[keep], c[keep]
    for k, code in enumerate(kinds):
        x = np.stack(
            [c, top[b], c * ms[b], c * mm[b], np.full(len(b), cost.flops), np.full(len(b), code)],
            axis=1,
        ).astype(np.float64)
        table[k, b, c] = cost(x)
    return table
