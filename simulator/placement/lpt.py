"""``lpt``: longest processing time first on the predicted costs: tasks in decreasing order of
their least predicted time, each onto the actor where it finishes first (Graham, 1969, for
unrelated machines through the ETC matrix); then each actor's sort-and-chunk pass."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simulator.placement import register
from simulator.placement.base import PlaceContext, Placement, Problem
from simulator.scheduler.baselines import lpt


@register("lpt")
@dataclass(frozen=True)
class LPT(Placement):
    """Parameters: ``chunking`` (sort and cut each actor's tasks; default true)."""

    def assign(self, prob: Problem, ctx: PlaceContext) -> np.ndarray:
        return lpt(prob.etc)
