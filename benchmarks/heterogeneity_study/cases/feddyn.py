"""FedDyn (Acar et al., ICLR 2021) under Dirichlet(0.1) label skew on mnist5k.

FedDyn's dynamic regularizer makes the clients' stationary points agree with the global one, so
under label skew it should end above FedAvg. alpha = 0.01, FedSentry's default and the paper's
usual value. Protocol: ``_shared.DIRICHLET_MNIST5K`` (its FedAvg runs are shared with the
``scaffold`` case).
"""

from benchmarks.heterogeneity_study.cases._shared import (
    DIRICHLET_MNIST5K,
    DIRICHLET_MNIST5K_FULL,
    DIRICHLET_MNIST5K_QUICK,
)
from benchmarks.heterogeneity_study.cases.base import CASES, Case, versus

CASE = CASES.register(
    Case(
        name="feddyn",
        claim="FedDyn ends with a higher global test accuracy than FedAvg under Dirichlet(0.1) "
        "label skew",
        base=DIRICHLET_MNIST5K,
        arms={
            "fedavg": {"algorithm": "fedavg"},
            "feddyn": {"algorithm": "feddyn", "algorithm_params": {"alpha": 0.01}},
        },
        comparisons=versus("fedavg", ["feddyn"]),
        quick=DIRICHLET_MNIST5K_QUICK,
        full=DIRICHLET_MNIST5K_FULL,
    )
)
