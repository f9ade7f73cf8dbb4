"""``ga``: the GBDT-predicted genetic-algorithm scheduler of the lab deck ("task scheduling":
GBDT predicts each task's run time on each device, a genetic algorithm decides which device runs
each task, a greedy pass orders the tasks on each device and gives the fitness).

Here the greedy pass is each actor's sort-and-chunk (an actor trains stacked chunks whose cost
follows their longest client), the predictor is :class:`simulator.scheduler.chunking.ChunkCost`
learned online from the measured chunks, and the search is
:func:`simulator.scheduler.chunk_ga.chunk_genetic`, seeded with ``greedy``'s assignment, the
ETC heuristics (``lpt``, ``minmin``, ``sufferage``, round robin) and optionally the memetic ETC
search (:func:`simulator.scheduler.ga.genetic`, ``etc_generations``), so it is never worse than
any of them by the predicted makespan.

Departures from the deck: the deck predicts per task and device; a stacked chunk's cost is not
a sum of task costs, so the predictor works per chunk and the fitness sums predicted chunks.
The deck's GA details (encoding, operators) are not given; ours are in ``chunk_ga``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simulator.placement import register
from simulator.placement.base import PlaceContext, Placement, Problem
from simulator.placement.legacy import greedy
from simulator.scheduler.baselines import BASELINES
from simulator.scheduler.chunk_ga import chunk_genetic
from simulator.scheduler.ga import genetic


@register("ga")
@dataclass(frozen=True)
class GA(Placement):
    """Parameters: ``generations`` (60), ``population`` (24), ``etc_generations`` (0: the
    memetic ETC search as one more seed, with this generation cap; off by default because its
    local search on band-averaged costs, full of ties, took up to 6 s a round), ``chunking``
    (true)."""

    generations: int = 60
    population: int = 24
    etc_generations: int = 0

    def __post_init__(self) -> None:
        if self.generations < 0 or self.etc_generations < 0 or self.population < 2:
            raise ValueError(
                f"placement 'ga': needs generations >= 0, etc_generations >= 0 "
                f"and population >= 2, got {self.generations}, "
                f"{self.etc_generations}, {self.population}"
            )

    def assign(self, prob: Problem, ctx: PlaceContext) -> np.ndarray:
        n, m = prob.etc.shape
        seeds = [BASELINES[name](prob.etc) for name in sorted(BASELINES)]
        lpt_samples = np.zeros(n, np.int64)
        fake = [_Task(i, int(w)) for i, w in enumerate(prob.work)]
        for a, g in enumerate(greedy(fake, m)):  # type: ignore[arg-type]
            lpt_samples[[t.client_id for t in g]] = a
        seeds.append(lpt_samples)
        if self.etc_generations and m > 1:
            seeds.append(
                genetic(
                    prob.etc, seed=ctx.seed, seconds=np.inf, generations=self.etc_generations
                ).assign
            )
        res = chunk_genetic(
            prob.table,
            prob.band,
            prob.actor_kind,
            seeds,
            seed=ctx.seed,
            generations=self.generations,
            population=self.population,
        )
        return res.assign


@dataclass(frozen=True)
class _Task:
    """What ``greedy`` reads of a task: its position as id, samples x epochs as samples."""

    client_id: int
    num_samples: int
    epochs: int = 1
