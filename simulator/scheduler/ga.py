"""Memetic genetic algorithm over task -> machine assignments, minimizing the makespan.

The population starts from the baselines' assignments (``BASELINES``), their locally improved
versions and perturbed copies of those; every generation breeds children by tournament
selection and uniform crossover, mutates them by moving tasks off their critical (most loaded)
machine, evaluates all of them at once (numpy ``bincount`` over the flattened population),
improves the best children by local search (``local_search.balance`` then ``improve``) and keeps
the best ``population`` of parents and children (elitism: the best ever found is never lost, so
the result is never worse than any seed).

Deterministic for a seed when the generation cap, not the time budget, ends the run.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from simulator.scheduler.baselines import BASELINES, check_etc
from simulator.scheduler.local_search import balance, improve


@dataclass(frozen=True)
class GAResult:
    """The best assignment found and how the search went."""

    assign: np.ndarray
    makespan: float
    generations: int
    seconds: float
    seed_makespans: dict[str, float]


def population_loads(etc: np.ndarray, pop: np.ndarray) -> np.ndarray:
    """Machine loads of every individual: ``pop`` (P, tasks) -> (P, machines)."""
    n, m = etc.shape
    size = pop.shape[0]
    flat = (np.arange(size)[:, None] * m + pop).ravel()
    weights = etc[np.arange(n)[None, :], pop].ravel()
    return np.bincount(flat, weights=weights, minlength=size * m).reshape(size, m)


def memetic_step(
    etc: np.ndarray,
    assign: np.ndarray,
    rounds: int = 8,
    steps: int = 2000,
    deadline: float = np.inf,
) -> np.ndarray:
    """Alternate ``balance`` and ``improve`` until the makespan stops falling (or ``deadline``)."""
    cur, span = assign, np.inf
    for _ in range(rounds):  # each round never raises the makespan
        cur, _ = balance(etc, cur, steps, deadline)
        cur, load = improve(etc, cur, steps, deadline=deadline)
        if not load.max() < span or time.perf_counter() > deadline:
            break
        span = load.max()
    return cur


def _mutate(
    etc: np.ndarray, child: np.ndarray, load: np.ndarray, moves: int, rng: np.random.Generator
) -> None:
    """Move up to ``moves`` random tasks off the critical machine to where they end first."""
    c = int(np.argmax(load))
    on_c = np.flatnonzero(child == c)
    if on_c.size == 0:
        return
    for t in rng.choice(on_c, size=min(moves, on_c.size), replace=False):
        finish = load + etc[t]
        finish[c] = np.inf
        k = int(np.argmin(finish))
        if np.isfinite(finish[k]):
            load[c] -= etc[t, c]
            load[k] += etc[t, k]
            child[t] = k


def _initial_population(
    etc: np.ndarray,
    starts: list[np.ndarray],
    population: int,
    noise: float,
    rng: np.random.Generator,
    deadline: float,
) -> tuple[np.ndarray, np.ndarray]:
    """The starting assignments, each improved once by the local search, topped up with noisy
    copies to ``population``; sorted by makespan (the population and its makespans)."""
    n, m = etc.shape
    pool = starts + [memetic_step(etc, s, deadline=deadline) for s in starts]
    while len(pool) < population:
        base = pool[len(starts) + len(pool) % len(starts)].copy()
        pick = rng.random(n) < max(noise, 1.0 / n)
        base[pick] = rng.integers(0, m, size=int(pick.sum()))
        pool.append(memetic_step(etc, base, deadline=deadline))
    pop = np.stack(pool)
    span = population_loads(etc, pop).max(axis=1)
    order = np.argsort(span, kind="stable")[:population]
    return pop[order], span[order]


def _generation(
    etc: np.ndarray,
    pop: np.ndarray,
    span: np.ndarray,
    population: int,
    tournament: int,
    moves: int,
    noise: float,
    improved_children: int,
    rng: np.random.Generator,
    deadline: float,
) -> tuple[np.ndarray, np.ndarray]:
    """One generation: tournament parents, uniform crossover, noise, mutation off the critical
    machine, local search on the best children, then the best distinct makespans survive."""
    n, m = etc.shape
    size = pop.shape[0]
    cand = rng.integers(0, size, size=(2 * population, min(tournament, size)))
    parents = cand.min(axis=1)  # population is sorted: the lowest index wins
    mask = rng.random((population, n)) < 0.5
    kids = np.where(mask, pop[parents[:population]], pop[parents[population:]])
    flip = rng.random((population, n)) < noise
    kids[flip] = rng.integers(0, m, size=int(flip.sum()))
    load = population_loads(etc, kids)
    for i in range(population):
        _mutate(etc, kids[i], load[i], moves, rng)
    kid_span = load.max(axis=1)
    for i in np.argsort(kid_span, kind="stable")[:improved_children]:
        kids[i] = memetic_step(etc, kids[i], deadline=deadline)
    kid_span = population_loads(etc, kids).max(axis=1)
    allpop = np.concatenate([pop, kids])
    allspan = np.concatenate([span, kid_span])
    _, first = np.unique(allspan, return_index=True)  # drop exact duplicates of a makespan
    keep = first[np.argsort(allspan[first], kind="stable")][:population]
    return allpop[keep], allspan[keep]


def genetic(
    etc: np.ndarray,
    seed: int = 0,
    seconds: float = 10.0,
    generations: int = 1000,
    population: int = 16,
    tournament: int = 3,
    moves: int = 2,
    noise: float = 0.01,
    improved_children: int = 4,
    seeds: Sequence[np.ndarray] = (),
) -> GAResult:
    """Search an assignment of ``etc``'s tasks to machines with a small makespan.

    Parameters
    ----------
    etc : np.ndarray
        tasks x machines expected times.
    seed : int
        Seed of every random choice.
    seconds : float
        Time budget (checked once per generation, after seeding).
    generations : int
        Generation cap.
    population : int
        Individuals kept per generation (>= 2); as many children are bred per generation.
    tournament : int
        Tournament size of parent selection.
    moves : int
        Tasks moved off the critical machine by one mutation.
    noise : float
        Fraction of a child's tasks reassigned to random machines (diversity).
    improved_children : int
        How many of the best children per generation get the local search.
    seeds : sequence of np.ndarray
        Extra starting assignments besides the baselines'.

    Returns
    -------
    GAResult
    """
    etc = check_etc(etc)
    n, m = etc.shape
    if population < 2 or tournament < 1 or generations < 0 or seconds < 0 or moves < 0:
        raise ValueError(
            "genetic: need population >= 2, tournament >= 1 and generations, seconds, moves >= 0"
        )
    if not 0.0 <= noise <= 1.0:
        raise ValueError(f"genetic: noise must lie in [0, 1], got {noise}")
    start = time.perf_counter()
    rng = np.random.default_rng(seed)
    named = {name: f(etc) for name, f in sorted(BASELINES.items())}
    starts = list(named.values()) + [np.asarray(s, dtype=np.int64) for s in seeds]
    for s in starts:
        if s.shape != (n,) or s.min() < 0 or s.max() >= m:
            raise ValueError(f"genetic: a seed assignment must hold {n} indices in [0, {m})")
    deadline = start + seconds
    pop, span = _initial_population(etc, starts, population, noise, rng, deadline)
    gen = 0
    while gen < generations and time.perf_counter() - start < seconds:
        gen += 1
        pop, span = _generation(
            etc, pop, span, population, tournament, moves, noise, improved_children, rng, deadline
        )
    seed_spans = {name: float(population_loads(etc, a[None]).max()) for name, a in named.items()}
    return GAResult(
        assign=pop[0].copy(),
        makespan=float(span[0]),
        generations=gen,
        seconds=time.perf_counter() - start,
        seed_makespans=seed_spans,
    )
