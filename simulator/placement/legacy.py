"""The single-chunk placements as plain functions: ``place(tasks, num_actors) -> groups``.

Greedy longest-processing-time on an estimated cost (samples x epochs) and round robin, each
actor training its group as one stacked chunk; registered as placements by ``greedy.py`` and
``round_robin.py``.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from simulator.placement.base import PlaceContext, Placed, Placement, predict_groups

if TYPE_CHECKING:
    from actors.request import TrainTask


def _cost(t: TrainTask) -> float:
    return float(max(t.num_samples, 1) * t.epochs)


def actors_worth_using(tasks: Sequence[TrainTask], num_actors: int, min_work: float) -> int:
    """How many actors a round is split over: none gets less than ``min_work``.

    ``min_work`` is in the tasks' cost unit (sample-epochs, or FLOPs when the caller scaled it).
    A stacked step costs about the same for 5 clients as for 50 (it is dispatch-bound), so a
    small round runs faster as one call than as several.
    """
    total = sum(_cost(t) for t in tasks)
    if min_work <= 0:
        return num_actors
    return max(1, min(num_actors, int(total // min_work)))


def greedy(tasks: Sequence[TrainTask], num_actors: int) -> list[list[TrainTask]]:
    """Largest task first onto the least-loaded actor (ties: lowest actor index)."""
    groups: list[list[TrainTask]] = [[] for _ in range(num_actors)]
    heap = [(0.0, i) for i in range(num_actors)]
    for t in sorted(tasks, key=lambda t: (-_cost(t), t.client_id)):
        load, i = heapq.heappop(heap)
        groups[i].append(t)
        heapq.heappush(heap, (load + _cost(t), i))
    return groups


def round_robin(tasks: Sequence[TrainTask], num_actors: int) -> list[list[TrainTask]]:
    """Task j goes to actor j mod n."""
    groups: list[list[TrainTask]] = [[] for _ in range(num_actors)]
    for j, t in enumerate(tasks):
        groups[j % num_actors].append(t)
    return groups


PLACERS: dict[str, Callable[[Sequence[TrainTask], int], list[list[TrainTask]]]] = {
    "greedy": greedy,
    "round_robin": round_robin,
}


def place(
    tasks: Sequence[TrainTask], num_actors: int, how: str = "greedy", min_work: float = 0.0
) -> list[list[TrainTask]]:
    """Groups of tasks, one per actor (``len == num_actors``; some may be empty)."""
    if how not in PLACERS:
        raise ValueError(f"placement: unknown {how!r}; valid: {sorted(PLACERS)}")
    if num_actors < 1:
        raise ValueError("placement: needs at least one actor")
    used = actors_worth_using(tasks, num_actors, min_work)
    groups = PLACERS[how](tasks, used)
    return groups + [[] for _ in range(num_actors - used)]


@dataclass(frozen=True)
class SingleChunk(Placement):
    """A placement of :data:`PLACERS` (its registered name), one chunk per actor (``chunking``
    is ignored).

    ``predict`` (false): also predict the schedule's makespan for the event log (fits the chunk
    predictor, which costs a little time per round).
    """

    uses_cost = False
    predict: bool = False

    def place(self, tasks: list[TrainTask], ctx: PlaceContext) -> Placed:
        groups = place(tasks, len(ctx.kinds), self.name, ctx.min_work)
        chunks: list[list[int] | None] = [None] * len(groups)
        return Placed(groups, chunks, predict_groups(groups, chunks, ctx) if self.predict else [])
