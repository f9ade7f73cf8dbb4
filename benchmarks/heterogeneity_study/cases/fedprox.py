"""FedProx (Li et al., MLSys 2020) on synthetic(1, 1) with 0 / 50 / 90% stragglers.

The notes' reproduction case R1: 30 FedProx synthetic(1, 1) devices (generated on demand), 10 a
round, multinomial logistic regression, batch 10, lr 0.01; a straggler runs U{1..E} local
epochs. The baseline is FedAvg as in the paper's Fig. 1: mu = 0 and the stragglers' partial work
dropped; the method is FedProx with mu = 1 keeping the partial work. The seed predicts a higher
accuracy (and a lower, steadier loss) for FedProx, the gap largest at 90% stragglers. Full runs
use E = 20 and 100 rounds (the paper: 200); quick runs E = 10 and 40 rounds.
"""

from benchmarks.heterogeneity_study.cases.base import CASES, Case, Comparison

FRACTIONS = (0.0, 0.5, 0.9)


def _arms() -> dict[str, dict[str, object]]:
    arms: dict[str, dict[str, object]] = {}
    for f in FRACTIONS:
        tag = f"st{round(100 * f)}"
        arms[f"fedavg-drop-{tag}"] = {
            "algorithm": "fedavg",
            "drop_stragglers": True,
            "straggler_fraction": f,
        }
        arms[f"fedprox-mu1-{tag}"] = {
            "algorithm": "fedprox",
            "algorithm_params": {"mu": 1.0},
            "straggler_fraction": f,
        }
    return arms


CASE = CASES.register(
    Case(
        name="fedprox",
        claim="FedProx (mu=1, partial work kept) beats FedAvg (stragglers dropped) on "
        "synthetic(1,1), most at 90% stragglers",
        base={
            "dataset": "synthetic",
            "synthetic_alpha": 1.0,
            "synthetic_beta": 1.0,
            "partition": "natural",
            "num_clients": 30,
            "clients_per_round": 10,
            "model": "logreg",
            "batch_size": 10,
            "lr": 0.01,
            "momentum": 0.0,
        },
        arms=_arms(),
        comparisons=tuple(
            Comparison(f"fedprox-mu1-st{round(100 * f)}", f"fedavg-drop-st{round(100 * f)}")
            for f in FRACTIONS
        ),
        quick={"rounds": 40, "local_epochs": 10},
        full={"rounds": 100, "local_epochs": 20},
    )
)
