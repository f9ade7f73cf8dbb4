"""``deadline_carryover``: deadline rounds whose late updates are aggregated, stale, in a later
round: the semi-synchronous setting of Sageflow (Park et al., NeurIPS 2021), whose
staleness-aware grouping is the ``sageflow`` defense."""

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


@register("deadline_carryover")
@dataclass(frozen=True)
class DeadlineCarryover(RoundPolicy):
    """Deadline rounds that keep late updates in flight.

    Staleness of an update aggregated in round ``r`` is ``r - base_round``. Updates that could
    only be used with staleness above ``max_staleness`` are dropped as soon as that is certain:
    already too stale now, or late and too stale next round. The round ends at
    ``min(round_start + deadline_s, last finish)`` over the usable updates; those landed by then
    arrive, the others stay pending and keep their ``base_round``: a pending update arrives in
    the first round whose end is >= its finish time. ``max_staleness=0`` behaves like
    ``deadline``.
    """

    deadline_s: float
    max_staleness: int = 5

    def __post_init__(self) -> None:
        check_positive("deadline_carryover", "deadline_s", self.deadline_s)
        check_positive(
            "deadline_carryover", "max_staleness", self.max_staleness, integer=True, strict=False
        )

    def lost_end(self, round_start: float, lost: Sequence[float]) -> float:
        """The last drop-out instant, or the deadline if that comes first."""
        return min(round_start + self.deadline_s, last_drop(round_start, lost))

    def close_round(
        self, round_idx: int, round_start: float, new: Sequence[Arrival], pending: Sequence[Arrival]
    ) -> RoundOutcome:
        every = in_flight(round_idx, round_start, new, pending)
        usable = [a for a in every if round_idx - a.base_round <= self.max_staleness]
        end = min(round_start + self.deadline_s, last_finish(round_start, usable))
        arrived: list[Arrival] = []
        dropped: list[Arrival] = []
        keep: list[Arrival] = []
        for a in every:
            if round_idx - a.base_round > self.max_staleness:
                dropped.append(a)
            elif a.finish_time <= end:
                arrived.append(a)
            elif round_idx + 1 - a.base_round <= self.max_staleness:
                keep.append(a)
            else:
                dropped.append(a)
        return RoundOutcome(end, tuple(arrived), tuple(dropped), tuple(keep))
