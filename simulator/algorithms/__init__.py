"""Federated algorithms, one module each, registered by name.

Every module of this package is imported when the package is, so an algorithm is added by
dropping one file here whose class is decorated with :func:`register` (``ALGORITHMS.register``:
the class's ``name`` attribute is its ``--algorithm`` name); nothing else changes.
"""

from __future__ import annotations

from typing import Any

from simulator.algorithms.base import Algorithm
from simulator.algorithms.exchange import Optimizer, ServerRound, WireInfo
from simulator.algorithms.params import Param
from simulator.config.fields import ConfigError
from simulator.config.learning import AlgorithmConfig
from simulator.registry import Registry

ALGORITHMS: Registry[type[Algorithm]] = Registry("algorithm")
register = ALGORITHMS.register


def make_algorithm(cfg: AlgorithmConfig, **overrides: Any) -> Algorithm:
    """Build the configured algorithm with its ``algorithm_params``; an unknown name or
    parameter lists the valid ones."""
    if cfg.algorithm not in ALGORITHMS:
        raise ConfigError(
            f"algorithm.algorithm: unknown value {cfg.algorithm!r}; valid: {ALGORITHMS.names()}"
        )
    return ALGORITHMS.get(cfg.algorithm)(cfg, **{**cfg.algorithm_params, **overrides})


ALGORITHMS.discover(__name__)

__all__ = [
    "ALGORITHMS",
    "Algorithm",
    "Optimizer",
    "Param",
    "ServerRound",
    "WireInfo",
    "make_algorithm",
    "register",
]
