"""The scheduler as the engine uses it: places every round, learns chunk times as they come.

:class:`Scheduler` holds the configured placement, the chunk cost model (predictor) and the
codes of the actor kinds it has seen; :meth:`Scheduler.place` answers a round's placement and
remembers its predicted makespan, :meth:`Scheduler.observe` feeds the measured chunks of the
actors' answers back to the predictor and returns the round's ``placement`` event field
(predicted and measured makespan, the placement's own time). Its state (observations, kind
codes) is checkpointed with the run.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from simulator.placement.base import PlaceContext, Placed, Placement
from simulator.scheduler.chunking import ChunkCost
from simulator.scheduler.predictor import FEATURES

if TYPE_CHECKING:
    from actors.request import TrainTask


class Scheduler:
    """Placement plus online chunk-time prediction.

    Parameters
    ----------
    placement : the configured placement.
    predictor : ``"gbdt"`` or ``"linear"``.
    flops : the model's training FLOPs per sample (a predictor feature).
    batch_size : the clients' batch size.
    seed : the experiment seed (each round's placement seed derives from it).
    min_work : the single-chunk placements' smallest group (sample-epochs).
    """

    def __init__(
        self,
        placement: Placement,
        predictor: str,
        flops: float,
        batch_size: int,
        seed: int,
        min_work: float = 0.0,
    ) -> None:
        self.placement = placement
        self.cost = ChunkCost(flops, batch_size, predictor, seed)
        self.seed, self.min_work, self.batch_size = seed, min_work, batch_size
        self.codes: dict[str, int] = {}
        self._last: tuple[float, float, list[float]] | None = None

    def kind_codes(self, kinds: Sequence[str]) -> np.ndarray:
        """Integer code of each actor kind (first seen, first numbered)."""
        for k in kinds:
            self.codes.setdefault(k, len(self.codes))
        return np.array([self.codes[k] for k in kinds], np.int64)

    def place(self, tasks: list[TrainTask], kinds: Sequence[str], rnd: int) -> Placed:
        """Place round ``rnd``'s tasks on actors of ``kinds`` (one name per actor)."""
        t0 = time.perf_counter()
        ctx = PlaceContext(
            self.kind_codes(kinds),
            self.cost,
            self.batch_size,
            seed=self.seed * 1_000_003 + rnd,
            min_work=self.min_work,
        )
        placed = self.placement.place(list(tasks), ctx)
        self._last = (placed.predicted_makespan, time.perf_counter() - t0, placed.predicted)
        return placed

    def replace(
        self, tasks: list[TrainTask], kinds: Sequence[str], rnd: int
    ) -> list[list[TrainTask]]:
        """Fault re-placement: a dead actor's ``tasks`` onto actors of ``kinds`` (the idle
        survivors), by the same placement; the round's logged prediction is kept."""
        ctx = PlaceContext(
            self.kind_codes(kinds),
            self.cost,
            self.batch_size,
            seed=self.seed * 1_000_003 + rnd,
            min_work=0.0,
        )
        return self.placement.place(list(tasks), ctx).groups

    def observe(self, chunks: list[dict[str, Any]]) -> dict[str, Any] | None:
        """Learn from the round's measured chunks (those tagged with an actor kind); the
        ``placement`` event field of the round placed last, or None if none was placed."""
        rows = [c for c in chunks if "kind" in c and float(c.get("seconds", 0.0)) > 0]
        if rows:
            x = np.array(
                [
                    [
                        c["clients"],
                        c["max_steps"],
                        c["steps"],
                        c["samples"],
                        self.cost.flops,
                        self.kind_codes([c["kind"]])[0],
                    ]
                    for c in rows
                ],
                np.float64,
            ).reshape(-1, len(FEATURES))
            self.cost.observe(x, np.array([c["seconds"] for c in rows], np.float64))
        if self._last is None:
            return None
        predicted, seconds, per_actor = self._last
        self._last = None
        per: dict[int, float] = {}
        for c in chunks:
            if "actor" in c:
                per[int(c["actor"])] = per.get(int(c["actor"]), 0.0) + float(c["seconds"])
        return {
            "name": self.placement.name,
            "predicted_s": round(predicted, 6) if per_actor else None,
            "measured_s": round(max(per.values(), default=0.0), 6),
            "predicted_actor_s": [round(p, 6) for p in per_actor],
            "measured_actor_s": [
                round(per.get(a, 0.0), 6) for a in range(1 + max(per, default=-1))
            ],
            "placement_s": round(seconds, 6),
            "observed_chunks": self.cost.observed,
        }

    def state_dict(self) -> dict[str, Any]:
        return {"cost": self.cost.state_dict(), "codes": dict(self.codes)}

    def load_state_dict(self, st: dict[str, Any]) -> None:
        self.cost.load_state_dict(st["cost"])
        self.codes = dict(st["codes"])
