"""Genetic search of task -> actor assignments whose fitness is the predicted sort-and-chunk
makespan (the lab deck's scheme: the GA decides which device runs each task, a greedy pass
orders the tasks on each device and gives the fitness).

The greedy pass (:mod:`simulator.scheduler.chunking`) cuts a round's tasks into step bands; an
actor trains its tasks of band ``b`` as one chunk, whose cost on its kind is read from the band
table ``T[kind, b, clients]``. Fitness of a population ``[P, n]`` is therefore one ``bincount``
(clients per actor and band) and one table gather, with no Python loop over individuals:
thousands of evaluations per millisecond.

The population starts from the seed assignments (the baselines'), so elitism makes the result
never worse than any seed by this fitness. Each generation: tournament selection, uniform
crossover, random reassignment of a few tasks (``noise``) and a directed mutation that moves
tasks off the most loaded actor onto the least loaded one. Deterministic for a seed (a
generation cap ends it, never a clock).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class ChunkGAResult:
    """The best assignment, its predicted per-actor seconds and the seeds' makespans."""

    assign: np.ndarray
    loads: np.ndarray
    generations: int
    seed_makespans: list[float]


def actor_loads(
    table: np.ndarray, band: np.ndarray, actor_kind: np.ndarray, pop: np.ndarray
) -> np.ndarray:
    """Predicted seconds of every actor under every assignment: ``pop`` ``[P, n]`` ->
    ``[P, m]`` (the sum over bands of ``table[actor_kind[a], b, clients of band b on a]``)."""
    size, m, nb = pop.shape[0], len(actor_kind), table.shape[1]
    flat = ((np.arange(size)[:, None] * m + pop) * nb + band[None, :]).ravel()
    counts = np.bincount(flat, minlength=size * m * nb).reshape(size, m, nb)
    cost = table[actor_kind[None, :, None], np.arange(nb)[None, None, :], counts]
    return cost.sum(axis=2)


def _score(loads: np.ndarray) -> np.ndarray:
    """Makespan, ties broken by the total (less work wasted on padding)."""
    return loads.max(axis=1) + 1e-9 * loads.sum(axis=1)


def chunk_genetic(
    table: np.ndarray,
    band: np.ndarray,
    actor_kind: Sequence[int],
    seeds: Sequence[np.ndarray],
    seed: int = 0,
    generations: int = 60,
    population: int = 24,
    tournament: int = 3,
    noise: float = 0.02,
    moves: int = 2,
) -> ChunkGAResult:
    """Search assignments of ``len(band)`` tasks to ``len(actor_kind)`` actors.

    Parameters
    ----------
    table : ``[kinds, bands, clients + 1]`` chunk seconds (:func:`band_table`).
    band : each task's band.
    actor_kind : each actor's row of ``table``.
    seeds : starting assignments (at least one), e.g. the baselines'.
    seed : seed of every random choice.
    generations, population, tournament : the search's size (population >= 2).
    noise : fraction of a child's tasks reassigned at random.
    moves : tasks moved from the most to the least loaded actor per child.
    """
    band = np.asarray(band, np.int64)
    kinds = np.asarray(actor_kind, np.int64)
    n, m = len(band), len(kinds)
    if population < 2 or tournament < 1 or generations < 0 or not seeds:
        raise ValueError(
            "chunk_genetic: need population >= 2, tournament >= 1, "
            "generations >= 0 and at least one seed assignment"
        )
    pop = np.stack([np.asarray(s, np.int64) for s in seeds])
    if pop.shape[1] != n or (n and (pop.min() < 0 or pop.max() >= m)):
        raise ValueError(f"chunk_genetic: a seed must hold {n} actor indices in [0, {m})")
    seed_spans = _score(actor_loads(table, band, kinds, pop)).tolist()
    rng = np.random.default_rng(seed)
    if n == 0 or m == 1:
        return ChunkGAResult(
            pop[0].copy(), actor_loads(table, band, kinds, pop[:1])[0], 0, seed_spans
        )
    while len(pop) < population:  # perturbed copies of the seeds
        child = pop[len(pop) % len(seeds)].copy()
        pick = rng.random(n) < max(noise, 1.0 / n)
        child[pick] = rng.integers(0, m, size=int(pick.sum()))
        pop = np.concatenate([pop, child[None]])
    score = _score(actor_loads(table, band, kinds, pop))
    order = np.argsort(score, kind="stable")[:population]
    pop, score = pop[order], score[order]
    for _ in range(generations):
        cand = rng.integers(0, len(pop), size=(2 * population, tournament))
        parents = cand.min(axis=1)  # sorted population: the lowest index wins
        mask = rng.random((population, n)) < 0.5
        kids = np.where(mask, pop[parents[:population]], pop[parents[population:]])
        flip = rng.random((population, n)) < noise
        kids[flip] = rng.integers(0, m, size=int(flip.sum()))
        loads = actor_loads(table, band, kinds, kids)
        hi, lo = loads.argmax(axis=1), loads.argmin(axis=1)
        for i in range(population):  # directed mutation: off the critical actor
            on = np.flatnonzero(kids[i] == hi[i])
            if len(on) and hi[i] != lo[i]:
                kids[i, rng.choice(on, size=min(moves, len(on)), replace=False)] = lo[i]
        allpop = np.concatenate([pop, kids])
        allscore = np.concatenate([score, _score(actor_loads(table, band, kinds, kids))])
        _, first = np.unique(allscore, return_index=True)  # drop exact duplicates
        keep = first[np.argsort(allscore[first], kind="stable")][:population]
        pop, score = allpop[keep], allscore[keep]
    return ChunkGAResult(
        pop[0].copy(), actor_loads(table, band, kinds, pop[:1])[0], generations, seed_spans
    )
