"""``overcommit``: select ``ceil(r * K)`` clients and aggregate the first ``K`` to arrive.

FedScale (Lai et al., ICML 2022) over-commits participants by 30% (``r = 1.3``) so that a round
does not wait for the slowest of the ``K`` it needs; the updates past the first ``K`` are
dropped (their compute is wasted, which the straggler study reports).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from simulator.policies import register
from simulator.policies.base import (
    Arrival,
    RoundOutcome,
    RoundPolicy,
    check_population,
    check_positive,
    close_first_k,
)


@register("overcommit")
@dataclass(frozen=True)
class Overcommit(RoundPolicy):
    """Over-commitment: ``ceil(ratio * k)`` start, the first ``k`` arrive, the rest are dropped.

    ``k = 0`` means the cohort size (``--clients-per-round``).
    """

    ratio: float = 1.3
    k: int = 0

    def __post_init__(self) -> None:
        check_positive("overcommit", "ratio", self.ratio, low=1.0, strict=False)
        check_positive("overcommit", "k", self.k, integer=True, strict=False)

    def resolved(self, clients_per_round: int) -> Overcommit:
        return self if self.k else Overcommit(self.ratio, clients_per_round)

    def cohort(self, clients_per_round: int, in_flight: int) -> int:
        # the tolerance keeps 1.3 * 10 at 13, not 14 from 13.000000000000002
        return math.ceil(self.ratio * (self.k or clients_per_round) - 1e-9)

    def check_sizes(self, clients_per_round: int, num_clients: int) -> None:
        k = self.k or clients_per_round
        what = f"ceil(ratio x k) = ceil({self.ratio:g} x {k}) = {self.cohort(k, 0)} clients a round"
        if not self.k:
            what += " (k defaults to --clients-per-round)"
        check_population("overcommit", what, self.cohort(k, 0), num_clients)

    def close_round(
        self, round_idx: int, round_start: float, new: Sequence[Arrival], pending: Sequence[Arrival]
    ) -> RoundOutcome:
        return close_first_k(
            "overcommit", self.k, round_idx, round_start, new, pending, keep_rest=False
        )
