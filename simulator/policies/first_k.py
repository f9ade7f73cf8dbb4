"""``first_k``: aggregate the first ``k`` of the selected clients' updates and drop the rest
(a round closed by a quota rather than a clock)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from simulator.policies import register
from simulator.policies.base import (
    Arrival,
    RoundOutcome,
    RoundPolicy,
    check_positive,
    close_first_k,
)


@register("first_k")
@dataclass(frozen=True)
class FirstK(RoundPolicy):
    """The round ends when the ``k``-th earliest update lands.

    The first ``k`` by ``(finish_time, client_id)`` arrive and the rest are dropped; with fewer
    than ``k`` in flight the round waits for all of them. ``k = 0`` means 80% of the selected
    clients (at least 1).
    """

    k: int = 0

    def __post_init__(self) -> None:
        check_positive("first_k", "k", self.k, integer=True, strict=False)

    def resolved(self, clients_per_round: int) -> FirstK:
        return self if self.k else FirstK(max(1, int(0.8 * clients_per_round)))

    def step_rows(self, clients_per_round: int) -> int:
        return min(self.k, clients_per_round)

    def close_round(
        self, round_idx: int, round_start: float, new: Sequence[Arrival], pending: Sequence[Arrival]
    ) -> RoundOutcome:
        return close_first_k(
            "first_k", self.k, round_idx, round_start, new, pending, keep_rest=False
        )
