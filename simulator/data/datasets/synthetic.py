"""``synthetic``: FedProx synthetic(alpha, beta) (Li et al., MLSys 2020), generated locally."""

from __future__ import annotations

from simulator.data.datasets import DATASETS
from simulator.data.datasets.base import Dataset
from simulator.data.synthetic import make_fedprox_synthetic


@DATASETS.register("synthetic")
def load_synthetic(
    *,
    seed: int,
    test_fraction: float,
    alpha: float = 1.0,
    beta: float = 1.0,
    iid: bool = False,
    num_devices: int = 30,
    dim: int = 60,
    min_samples: int = 50,
    max_samples: int = 1000,
) -> Dataset:
    """FedProx synthetic(alpha, beta), see :mod:`simulator.data.synthetic`; groups = device."""
    s = make_fedprox_synthetic(
        seed=seed,
        alpha=alpha,
        beta=beta,
        iid=iid,
        num_devices=num_devices,
        dim=dim,
        min_samples=min_samples,
        max_samples=max_samples,
        test_fraction=test_fraction,
    )
    return Dataset(
        "synthetic", s.x_train, s.y_train, s.x_test, s.y_test, 10, (dim,), groups=s.train_groups
    )
