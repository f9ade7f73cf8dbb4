"""Federated algorithms, one module each, registered by name.

Every module of this package is imported when the package is, so an algorithm is added by
dropping one file here whose class is decorated with :func:`register`; nothing else changes.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any

from simulator.algorithms.base import Algorithm, Optimizer, Param, ServerRound
from simulator.config.sections import AlgorithmConfig, ConfigError

ALGORITHMS: dict[str, type[Algorithm]] = {}


def register(cls: type[Algorithm]) -> type[Algorithm]:
    """Class decorator: make ``cls`` available as ``--algorithm cls.name``."""
    if cls.name in ALGORITHMS and ALGORITHMS[cls.name] is not cls:
        raise ValueError(f"algorithm {cls.name!r} is registered twice")
    ALGORITHMS[cls.name] = cls
    return cls


def make_algorithm(cfg: AlgorithmConfig, **overrides: Any) -> Algorithm:
    """Build the configured algorithm with its ``algorithm_params``; an unknown name or
    parameter lists the valid ones."""
    if cfg.algorithm not in ALGORITHMS:
        raise ConfigError(f"algorithm.algorithm: unknown value {cfg.algorithm!r}; valid: "
                          f"{sorted(ALGORITHMS)}")
    return ALGORITHMS[cfg.algorithm](cfg, **{**cfg.algorithm_params, **overrides})


for _mod in pkgutil.iter_modules(__path__):
    if _mod.name != "base":
        importlib.import_module(f"{__name__}.{_mod.name}")

__all__ = ["ALGORITHMS", "Algorithm", "Optimizer", "Param", "ServerRound", "make_algorithm",
           "register"]
