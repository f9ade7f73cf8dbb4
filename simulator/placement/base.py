"""What a placement sees and returns, and the steps the cost-based placements share.

A placement maps a round's training tasks onto the pool's actors and says how each actor cuts
its tasks into stacked chunks (:class:`Placed`). Cost-based placements see the round as a
:class:`Problem`: the tasks' local steps and samples, their step bands and the band table of
predicted chunk seconds per actor kind (:mod:`simulator.scheduler.chunking`), and an ETC matrix
(expected time of each task on each actor: its share of its band's chunk on the actor's kind)
for the classic heuristics. :func:`finish` turns an assignment into groups with each actor's
sort-and-chunk cuts and its predicted seconds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from simulator.scheduler.chunking import (
    ChunkCost,
    band_table,
    bands,
    chunk_features,
    sort_and_chunk,
    task_steps,
)

if TYPE_CHECKING:
    from actors.request import TrainTask


@dataclass
class PlaceContext:
    """The round's setting of a placement.

    Attributes
    ----------
    kinds : kind code of each actor (a predictor feature; equal codes = identical actors).
    cost : the chunk cost model (predictor, or its prior before any observation).
    batch_size : the clients' batch size (local steps from samples).
    seed : this round's seed (randomized placements).
    min_work : the legacy placements' smallest group, in sample-epochs (0: use every actor).
    """

    kinds: np.ndarray
    cost: ChunkCost
    batch_size: int
    seed: int = 0
    min_work: float = 0.0


@dataclass
class Placed:
    """A placement's answer: per actor, its tasks in training order, its chunk sizes (None:
    one chunk of all of them) and its predicted seconds."""

    groups: list[list[TrainTask]]
    chunks: list[list[int] | None]
    predicted: list[float]

    @property
    def predicted_makespan(self) -> float:
        return max(self.predicted, default=0.0)


@dataclass
class Problem:
    """A round as the cost-based placements see it (see the module docstring)."""

    steps: np.ndarray
    samples: np.ndarray
    band: np.ndarray
    table: np.ndarray  # [distinct kinds, bands, clients + 1]
    actor_kind: np.ndarray  # each actor's row of ``table``
    etc: np.ndarray  # [tasks, actors]
    work: np.ndarray  # samples x epochs (greedy's cost)


def problem(tasks: list[TrainTask], ctx: PlaceContext) -> Problem:
    """The round's :class:`Problem` (bands from the most common kind's cost)."""
    samples = np.array([t.num_samples for t in tasks], np.int64)
    steps = task_steps(samples, [t.epochs for t in tasks], ctx.batch_size)
    codes, actor_kind = np.unique(ctx.kinds, return_inverse=True)
    common = int(codes[np.bincount(actor_kind).argmax()])
    band = bands(steps, samples, ctx.cost, common, len(ctx.kinds))
    table = band_table(steps, samples, band, ctx.cost, codes.tolist())
    count = np.bincount(band, minlength=table.shape[1])
    per_task = table[:, np.arange(table.shape[1]), count] / np.maximum(count, 1)  # [kinds, b]
    etc = per_task[actor_kind][:, band].T
    work = samples * np.array([t.epochs for t in tasks], np.int64)
    return Problem(steps, samples, band, table, actor_kind.astype(np.int64), etc, work)


def predict_groups(
    groups: list[list[TrainTask]], chunks: list[list[int] | None], ctx: PlaceContext
) -> list[float]:
    """Predicted seconds of each actor's chunks."""
    out = []
    for a, (g, sizes) in enumerate(zip(groups, chunks, strict=True)):
        samples = np.array([t.num_samples for t in g], np.int64)
        steps = task_steps(samples, [t.epochs for t in g], ctx.batch_size)
        total, at = 0.0, 0
        for n in sizes if sizes is not None else ([len(g)] if g else []):
            x = chunk_features(
                steps[at : at + n], samples[at : at + n], ctx.cost.flops, int(ctx.kinds[a])
            )
            total += float(ctx.cost(x)[0])
            at += n
        out.append(total)
    return out


def finish(
    tasks: list[TrainTask],
    assign: np.ndarray,
    prob: Problem,
    ctx: PlaceContext,
    chunking: bool = True,
) -> Placed:
    """Groups of ``assign``; with ``chunking`` each actor's tasks sorted longest first and cut
    by :func:`sort_and_chunk`, else one chunk per actor in task order."""
    groups: list[list[TrainTask]] = []
    sizes_of: list[list[int] | None] = []
    predicted: list[float] = []
    for a in range(len(ctx.kinds)):
        mine = np.flatnonzero(assign == a)
        if not chunking or not len(mine):
            groups.append([tasks[i] for i in mine])
            sizes_of.append(None)
            predicted.append(0.0)
            continue
        order, sizes, secs = sort_and_chunk(
            prob.steps[mine], prob.samples[mine], ctx.cost, int(ctx.kinds[a])
        )
        groups.append([tasks[i] for i in mine[order]])
        sizes_of.append(sizes)
        predicted.append(secs)
    if not chunking:
        predicted = predict_groups(groups, sizes_of, ctx)
    return Placed(groups, sizes_of, predicted)


@dataclass(frozen=True)
class Placement:
    """A registered placement (a frozen dataclass whose fields are its parameters).

    Subclasses implement :meth:`assign` (task -> actor from a :class:`Problem`); the legacy
    single-chunk placements override :meth:`place` instead.
    """

    name: ClassVar[str] = ""
    #: whether the chunk cost model is consulted (the legacy placements only log it)
    uses_cost: ClassVar[bool] = True
    #: the chunk cost model when ``--placement-param predictor=`` is not given: ``gbdt``
    #: learns from measured chunk times; ``prior`` never learns, so the schedules, and the
    #: results, depend on the seed only (bitwise reproducible)
    default_predictor: ClassVar[str] = "gbdt"
    chunking: bool = True

    def assign(self, prob: Problem, ctx: PlaceContext) -> np.ndarray:
        raise NotImplementedError

    def place(self, tasks: list[TrainTask], ctx: PlaceContext) -> Placed:
        if not tasks:
            return Placed(
                [[] for _ in ctx.kinds], [None for _ in ctx.kinds], [0.0 for _ in ctx.kinds]
            )
        prob = problem(tasks, ctx)
        return finish(tasks, self.assign(prob, ctx), prob, ctx, self.chunking)

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, **{k: v for k, v in self.__dict__.items()}}
