"""``greedy``: FedSentry's original placement, longest task (samples x epochs) first onto the
least loaded actor, each actor training its group as one stacked chunk. Blind to actor kinds and
to padding; the reference the scheduler is measured against."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from simulator.placement import register
from simulator.placement.base import PlaceContext, Placed, Placement, predict_groups
from simulator.placement.legacy import place

if TYPE_CHECKING:
    from actors.trainer import TrainTask


@register("greedy")
@dataclass(frozen=True)
class Greedy(Placement):
    """LPT on samples x epochs; one chunk per actor (``chunking`` is ignored).

    ``predict`` (false): also predict the schedule's makespan for the event log (fits the chunk
    predictor, which costs a little time per round).
    """

    uses_cost = False
    predict: bool = False

    def place(self, tasks: list[TrainTask], ctx: PlaceContext) -> Placed:
        groups = place(tasks, len(ctx.kinds), self.name, ctx.min_work)
        chunks: list[list[int] | None] = [None] * len(groups)
        return Placed(groups, chunks,
                      predict_groups(groups, chunks, ctx) if self.predict else [])
