"""``wait_for_all``: synchronous FedAvg (McMahan et al., AISTATS 2017) on the virtual clock."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from simulator.policies import register
from simulator.policies.base import Arrival, RoundOutcome, RoundPolicy, in_flight, last_finish


@register("wait_for_all")
@dataclass(frozen=True)
class WaitForAll(RoundPolicy):
    """Every update arrives; the round ends when the last one lands."""

    def close_round(
        self, round_idx: int, round_start: float, new: Sequence[Arrival], pending: Sequence[Arrival]
    ) -> RoundOutcome:
        every = in_flight(round_idx, round_start, new, pending)
        return RoundOutcome(last_finish(round_start, every), every)
