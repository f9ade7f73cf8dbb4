"""Federated algorithms, one module each, registered by name."""

from simulator.algorithms.base import Algorithm, AlgorithmState
from simulator.algorithms.fedavg import FedAvg
from simulator.algorithms.fedprox import FedProx
from simulator.config import AlgorithmConfig, ConfigError

ALGORITHMS: dict[str, type[Algorithm]] = {"fedavg": FedAvg, "fedprox": FedProx}


def make_algorithm(cfg: AlgorithmConfig) -> Algorithm:
    """Build the configured algorithm; an unknown name lists the valid ones."""
    if cfg.algorithm not in ALGORITHMS:
        raise ConfigError(f"algorithm.algorithm: unknown {cfg.algorithm!r}; valid: "
                          f"{sorted(ALGORITHMS)}")
    return ALGORITHMS[cfg.algorithm](cfg)


__all__ = ["ALGORITHMS", "Algorithm", "AlgorithmState", "make_algorithm"]
