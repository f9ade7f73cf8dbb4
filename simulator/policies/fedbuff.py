"""``fedbuff``: buffered asynchronous aggregation.

Nguyen, Malik, Zhan, Yousefpour, Rabbat, Malek, Huba, "Federated Learning with Buffered
Asynchronous Aggregation", AISTATS 2022 (Algorithm 1). Up to ``concurrency`` clients train at
once, each from the global model current when it started; the server buffers arriving updates and
takes a step every time ``k`` of them are buffered; an update of staleness ``s`` (server steps
since its client started) is weighted by ``1 / sqrt(1 + s)``.

Departures from the paper, both so that every defense applies unchanged: the buffer's rows are
combined by the configured defense (FedAvg's sample-count-weighted mean rather than the paper's
uniform ``1/K`` sum), after scaling each row by its staleness weight; the server learning rate is
``--server-lr``. A new client starts only at a server step (the top-up to ``concurrency``), not at
the exact instant a slot frees, which the paper's simulator also does between buffer flushes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import numpy as np

if TYPE_CHECKING:
    import torch

from simulator.policies import register
from simulator.policies.base import (
    Arrival,
    RoundOutcome,
    RoundPolicy,
    check_population,
    check_positive,
    close_first_k,
)


def staleness_weight(staleness: np.ndarray) -> np.ndarray:
    """FedBuff's ``1 / sqrt(1 + s)``: 1, 0.7071, 0.5774, 0.5 for s = 0, 1, 2, 3."""
    return 1.0 / np.sqrt(1.0 + np.asarray(staleness, dtype=np.float64))


@register("fedbuff")
@dataclass(frozen=True)
class FedBuff(RoundPolicy):
    """``concurrency`` clients in flight; a server step per ``k`` buffered updates.

    ``concurrency = 0`` means the cohort size (``--clients-per-round``).
    """

    asynchronous: ClassVar[bool] = True
    adjusts_rows: ClassVar[bool] = True

    k: int = 10
    concurrency: int = 0

    def __post_init__(self) -> None:
        check_positive("fedbuff", "k", self.k, integer=True)
        check_positive("fedbuff", "concurrency", self.concurrency, integer=True, strict=False)
        if self.concurrency and self.k > self.concurrency:
            raise ValueError(
                f"round policy 'fedbuff': k ({self.k}) must be <= concurrency ({self.concurrency})"
            )

    def resolved(self, clients_per_round: int) -> FedBuff:
        if self.concurrency:
            return self
        if self.k > clients_per_round:
            raise ValueError(
                f"round policy 'fedbuff': k ({self.k}) must be <= concurrency "
                f"({clients_per_round}): concurrency defaults to --clients-per-round; give "
                f"--policy-param concurrency=N with N >= {self.k}, or a smaller k"
            )
        return FedBuff(self.k, clients_per_round)

    def check_sizes(self, clients_per_round: int, num_clients: int) -> None:
        self.resolved(clients_per_round)
        what = f"concurrency ({self.concurrency})"
        check_population("fedbuff", what, self.concurrency, num_clients)

    def cohort(self, clients_per_round: int, in_flight: int) -> int:
        return max(0, (self.concurrency or clients_per_round) - in_flight)

    def step_rows(self, clients_per_round: int) -> int:
        return self.k

    def close_round(
        self, round_idx: int, round_start: float, new: Sequence[Arrival], pending: Sequence[Arrival]
    ) -> RoundOutcome:
        return close_first_k(
            "fedbuff", self.k, round_idx, round_start, new, pending, keep_rest=True
        )

    def adjust_rows(
        self, rows: torch.Tensor, staleness: np.ndarray, drift: Callable[[], torch.Tensor]
    ) -> torch.Tensor:
        import torch

        w = torch.from_numpy(staleness_weight(staleness).astype(np.float32))
        return rows * w[:, None].to(rows.dtype)
