"""``sufferage``: Sufferage on the predicted costs (Maheswaran et al., HCW 1999): place first
the task that would suffer most (second-best minus best finish) if denied its best actor; then
each actor's sort-and-chunk pass."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simulator.placement import register
from simulator.placement.base import PlaceContext, Placement, Problem
from simulator.scheduler.baselines import sufferage


@register("sufferage")
@dataclass(frozen=True)
class Sufferage(Placement):
    """Parameters: ``chunking`` (sort and cut each actor's tasks; default true)."""

    def assign(self, prob: Problem, ctx: PlaceContext) -> np.ndarray:
        return sufferage(prob.etc)
