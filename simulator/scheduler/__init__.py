"""Placement search on expected-time-to-compute (ETC) matrices: baselines, GA, LP bound.

``schedule(name, etc)`` runs the method called ``name`` (``METHOD_NAMES``) and returns an
assignment array task -> machine; ``makespan(etc, assign)`` scores it; ``lst_bound(etc)`` is the
LP lower bound it is measured against. Instances: ``simulator.scheduler.instances``; chunk
runtime predictors (GBDT, Parrot's linear fit): ``simulator.scheduler.predictor``.
"""

from __future__ import annotations

import numpy as np

from simulator.scheduler.baselines import BASELINES, baseline, loads, makespan
from simulator.scheduler.ga import GAResult, genetic
from simulator.scheduler.lp_bound import lst_bound
from simulator.scheduler.predictor import PREDICTORS, GBDTPredictor, LinearPredictor

METHOD_NAMES: tuple[str, ...] = ("ga", *sorted(BASELINES))


def schedule(
    name: str, etc: np.ndarray, seed: int = 0, seconds: float = 10.0, generations: int = 1000
) -> np.ndarray:
    """Assignment task -> machine of ``etc`` by method ``name``.

    ``seed``, ``seconds`` and ``generations`` apply to ``"ga"`` only; ValueError on an unknown
    name lists the valid ones.
    """
    if name == "ga":
        return genetic(etc, seed=seed, seconds=seconds, generations=generations).assign
    if name not in BASELINES:
        raise ValueError(f"placement: unknown {name!r}; valid: {list(METHOD_NAMES)}")
    return baseline(name, etc)


__all__ = [
    "BASELINES",
    "PREDICTORS",
    "GAResult",
    "GBDTPredictor",
    "LinearPredictor",
    "METHOD_NAMES",
    "baseline",
    "genetic",
    "loads",
    "lst_bound",
    "makespan",
    "schedule",
]
