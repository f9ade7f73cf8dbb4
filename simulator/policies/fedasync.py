"""``fedasync``: every arriving update is mixed into the global model with a staleness weight.

Xie, Koyejo, Gupta, "Asynchronous Federated Optimization", arXiv:1903.03934 (2019), Algorithm 1
with the polynomial staleness function: on the arrival of a client model ``x_new`` trained from the
global model of step ``tau``, at server step ``t``,

    alpha_t = alpha * (t - tau + 1) ** (-a),      x_t = (1 - alpha_t) x_{t-1} + alpha_t x_new.

The client's row is ``x_new - base`` (relative to the model it trained from), so the mixing step is
``x_t - x_{t-1} = alpha_t * (row + base - x_{t-1})``: :meth:`FedAsync.adjust_rows` returns that,
and the defense of the single-row step (FedAvg: the row itself) plus the server update with
``--server-lr 1`` applies it exactly.

Departures: ``concurrency`` clients train at once and a new one starts at each server step (the
paper's scheduler triggers clients at random times); only the polynomial staleness function is
implemented (not the hinge one); the paper's proximal client term is the ``fedprox`` algorithm,
combined at will. Defenses that need several rows (Krum, Bulyan, trimmed mean) cannot run on one
row per step and say so.
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


@register("fedasync")
@dataclass(frozen=True)
class FedAsync(RoundPolicy):
    """One server step per arrival, mixing weight ``alpha * (staleness + 1) ** -a``.

    ``concurrency = 0`` means the cohort size (``--clients-per-round``).
    """

    asynchronous: ClassVar[bool] = True
    adjusts_rows: ClassVar[bool] = True

    alpha: float = 0.6
    a: float = 0.5
    concurrency: int = 0

    def __post_init__(self) -> None:
        check_positive("fedasync", "alpha", self.alpha, high=1.0)
        check_positive("fedasync", "a", self.a, strict=False)
        check_positive("fedasync", "concurrency", self.concurrency, integer=True, strict=False)

    def resolved(self, clients_per_round: int) -> FedAsync:
        return self if self.concurrency else FedAsync(self.alpha, self.a, clients_per_round)

    def check_sizes(self, clients_per_round: int, num_clients: int) -> None:
        what = f"concurrency ({self.concurrency})"
        check_population("fedasync", what, self.concurrency, num_clients)

    def step_rows(self, clients_per_round: int) -> int:
        return 1  # one arrival a step

    def cohort(self, clients_per_round: int, in_flight: int) -> int:
        return max(0, (self.concurrency or clients_per_round) - in_flight)

    def mixing_weight(self, staleness: np.ndarray) -> np.ndarray:
        """``alpha * (s + 1) ** -a``; alpha=0.6, a=0.5: 0.6, 0.4243, 0.3464 for s = 0, 1, 2."""
        return self.alpha * (np.asarray(staleness, dtype=np.float64) + 1.0) ** (-self.a)

    def close_round(
        self, round_idx: int, round_start: float, new: Sequence[Arrival], pending: Sequence[Arrival]
    ) -> RoundOutcome:
        return close_first_k("fedasync", 1, round_idx, round_start, new, pending, keep_rest=True)

    def adjust_rows(
        self, rows: torch.Tensor, staleness: np.ndarray, drift: Callable[[], torch.Tensor]
    ) -> torch.Tensor:
        import torch

        w = torch.from_numpy(self.mixing_weight(staleness).astype(np.float32))
        return (rows + drift().to(rows.dtype)) * w[:, None].to(rows.dtype)
