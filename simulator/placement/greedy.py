"""``greedy``: FedSentry's original placement, longest task (samples x epochs) first onto the
least loaded actor, each actor training its group as one stacked chunk. Blind to actor kinds and
to padding; the reference the scheduler is measured against."""

from __future__ import annotations

from dataclasses import dataclass

from simulator.placement import register
from simulator.placement.legacy import SingleChunk


@register("greedy")
@dataclass(frozen=True)
class Greedy(SingleChunk):
    """LPT on samples x epochs; parameters as :class:`SingleChunk`."""
