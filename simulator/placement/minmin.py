"""``minmin``: Min-Min on the predicted costs (Ibarra & Kim, 1977; the heuristic of Braun et
al., JPDC 2001): repeatedly place the task whose earliest finish is smallest; then each actor's
sort-and-chunk pass."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simulator.placement import register
from simulator.placement.base import PlaceContext, Placement, Problem
from simulator.scheduler.baselines import minmin


@register("minmin")
@dataclass(frozen=True)
class MinMin(Placement):
    """Parameters: ``chunking`` (sort and cut each actor's tasks; default true)."""

    def assign(self, prob: Problem, ctx: PlaceContext) -> np.ndarray:
        return minmin(prob.etc)
