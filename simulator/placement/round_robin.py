"""``round_robin``: task j onto actor j mod n, each actor training its group as one stacked
chunk (the order of the plan). Blind to costs, kinds and padding."""

from __future__ import annotations

from dataclasses import dataclass

from simulator.placement import register
from simulator.placement.legacy import SingleChunk


@register("round_robin")
@dataclass(frozen=True)
class RoundRobin(SingleChunk):
    """Task j to actor j mod n; parameters as :class:`SingleChunk`."""
