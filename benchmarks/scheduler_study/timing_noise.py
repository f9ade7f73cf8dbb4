"""What the timing noise allows the scheduler benchmark's predictor part
(:mod:`benchmarks.scheduler_study.predictor`): the repeat-to-repeat MAPE of chunks measured in
both repeats of a placement, the least MAPE any predictor can score on them, and an oracle GBDT
fitted on the held-out chunks too."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from benchmarks.scheduler_study.live import Run
from simulator.scheduler.predictor import GBDTPredictor


def _pairs(runs: Sequence[Run]) -> list[tuple[float, float]]:
    """Seconds of every chunk measured in both repeats of the same placement (same round,
    clients, steps and samples; round 0, which also pays start-up costs, left out)."""
    seen: dict[tuple[Any, ...], dict[int, float]] = {}
    for r in runs:
        for e in r.events:
            if int(e["round"]) == 0:
                continue  # the first round also pays start-up costs
            for c in e["chunks"]:
                key = (
                    r.task,
                    r.label,
                    int(e["round"]),
                    c["clients"],
                    c["max_steps"],
                    c["steps"],
                    c["samples"],
                )
                seen.setdefault(key, {})[r.repeat] = float(c["seconds"])
    return [
        (a, b)
        for t in seen.values()
        if len(t) == 2
        for a, b in [tuple(t.values())]
        if a > 0 and b > 0
    ]


def repeat_mape(runs: Sequence[Run]) -> float | None:
    """The repeat-to-repeat noise: MAPE of predicting a chunk's seconds by the seconds of the
    identical chunk in the other repeat of the same placement, both ways; None without such
    pairs. With independent noise of each measurement this is ~sqrt(2) times the MAPE of a
    predictor that knew each chunk's expected time (the difference of two noisy measurements
    carries both noises)."""
    errs = [e for a, b in _pairs(runs) for e in (abs(a - b) / b, abs(a - b) / a)]
    return float(np.mean(errs)) if errs else None


def pair_bound(runs: Sequence[Run]) -> float | None:
    """The least MAPE that *any* predictor (a function of the chunk's features) scores on the
    chunks measured twice: one prediction ``p`` for both measurements ``a < b`` costs
    ``|p - a| / a + |p - b| / b >= (b - a) / b`` (at ``p = a``), so per chunk at least
    ``(b - a) / (2 b)``; None without pairs. A hard bound, not an estimate."""
    errs = [abs(a - b) / (2 * max(a, b)) for a, b in _pairs(runs)]
    return float(np.mean(errs)) if errs else None


def oracle_predictions(x: np.ndarray, y: np.ndarray, held: np.ndarray, seed: int) -> np.ndarray:
    """Predictions for the held-out chunks of a GBDT fitted on *all* chunks, held-out ones
    included: what these features allow on this run's timing noise (not a predictor that
    could be deployed; the yardstick of the proposed bar)."""
    model = GBDTPredictor(seed=seed)
    model.observe(x, y)
    return model.predict(x[held])
