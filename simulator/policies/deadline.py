"""``deadline``: a round ends at a fixed virtual-time deadline and drops what lands later
(the "ignore stragglers" FedAvg baseline of the Sageflow and FedScale studies)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from simulator.policies import register
from simulator.policies.base import (
    Arrival,
    RoundOutcome,
    RoundPolicy,
    check_positive,
    in_flight,
    last_drop,
    last_finish,
)


@register("deadline")
@dataclass(frozen=True)
class Deadline(RoundPolicy):
    """The round ends at ``min(round_start + deadline_s, last finish time)``.

    Ending early when every update has landed is what a server that knows its selected
    clients would do. Updates landing after the deadline are dropped; landing exactly at the
    deadline counts as arrived.
    """

    deadline_s: float

    def __post_init__(self) -> None:
        check_positive("deadline", "deadline_s", self.deadline_s)

    def lost_end(self, round_start: float, lost: Sequence[float]) -> float:
        """The last drop-out instant, or the deadline if that comes first."""
        return min(round_start + self.deadline_s, last_drop(round_start, lost))

    def close_round(
        self, round_idx: int, round_start: float, new: Sequence[Arrival], pending: Sequence[Arrival]
    ) -> RoundOutcome:
        every = in_flight(round_idx, round_start, new, pending)
        end = min(round_start + self.deadline_s, last_finish(round_start, every))
        return RoundOutcome(
            end,
            tuple(a for a in every if a.finish_time <= end),
            tuple(a for a in every if a.finish_time > end),
        )
