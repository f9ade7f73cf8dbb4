"""SCAFFOLD (Karimireddy et al., ICML 2020) under Dirichlet(0.1) label skew on mnist5k.

SCAFFOLD's claim is that its control variates correct the client drift that label skew causes,
so it ends above FedAvg. The seeds disagree on this: MOON's tables (CVPR 2021) put SCAFFOLD
below FedAvg on CIFAR-100 and Tiny-ImageNet (52.5 vs 64.5, 16.0 vs 23.0), FedFM's above it; the
case checks the original paper's direction. Protocol: ``_shared.DIRICHLET_MNIST5K``.
"""

from benchmarks.heterogeneity_study.cases._shared import (
    DIRICHLET_MNIST5K,
    DIRICHLET_MNIST5K_FULL,
    DIRICHLET_MNIST5K_QUICK,
)
from benchmarks.heterogeneity_study.cases.base import CASES, Case, versus

CASE = CASES.register(
    Case(
        name="scaffold",
        claim="SCAFFOLD ends with a higher global test accuracy than FedAvg under Dirichlet(0.1) "
        "label skew",
        base=DIRICHLET_MNIST5K,
        arms={"fedavg": {"algorithm": "fedavg"}, "scaffold": {"algorithm": "scaffold"}},
        comparisons=versus("fedavg", ["scaffold"]),
        quick=DIRICHLET_MNIST5K_QUICK,
        full=DIRICHLET_MNIST5K_FULL,
    )
)
