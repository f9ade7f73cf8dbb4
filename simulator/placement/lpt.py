"""``lpt``: longest processing time first on the predicted costs: tasks in decreasing order of
their least predicted time, each onto the actor where it finishes first (Graham, 1969, for
unrelated machines through the ETC matrix); then each actor's sort-and-chunk pass.

The default placement. Its chunk cost model defaults to the fixed prior (``predictor=prior``):
on the mnist5k CNN and MLP (100 virtual clients a round, 2 CPU actors) it was as fast as with
the learned GBDT and 3-7x faster than ``greedy``, and a run is bitwise reproducible. The
learned predictor (``predictor=gbdt``) is for pools the prior cannot tell apart: actor kinds of
different speeds, GPUs (``benchmarks/scheduler.py --parts live``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simulator.placement import register
from simulator.placement.base import PlaceContext, Placement, Problem
from simulator.scheduler.baselines import lpt


@register("lpt")
@dataclass(frozen=True)
class LPT(Placement):
    """Parameters: ``chunking`` (sort and cut each actor's tasks; default true); predictor
    ``prior`` unless ``predictor=`` says otherwise."""

    default_predictor = "prior"

    def assign(self, prob: Problem, ctx: PlaceContext) -> np.ndarray:
        return lpt(prob.etc)
