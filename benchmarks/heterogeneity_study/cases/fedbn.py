"""FedBN (Li et al., ICLR 2021) under feature shift: each client scored on its own test split.

The notes' reproduction case R2 on the 5,000 MNIST digits: 5 clients with IID labels, each with
its own fixed input transform (``feature_shift`` 1.0: contrast, brightness, noise and a small
translation, seeded per client), an MLP with BatchNorm after each hidden layer, all clients every
round, E = 1, batch 32, SGD lr 0.01; FedProx with mu = 0.01 (FedBN's reference code). 20% of each
client's rows are its local test split; FedAvg and FedProx are scored with the global model,
FedBN with the shared weights and the client's own BatchNorm. The seed predicts FedBN > FedAvg
~ FedProx on the mean per-client accuracy, the gain largest on the most shifted client (here:
the worst client, ``client_accuracy_worst10`` with 5 clients).
"""

from benchmarks.heterogeneity_study.cases.base import CASES, Case, Comparison

CASE = CASES.register(
    Case(
        name="fedbn",
        claim="FedBN beats FedAvg and FedProx on the mean per-client accuracy under feature shift, "
        "most on the most shifted client",
        base={
            "dataset": "mnist5k",
            "partition": "iid",
            "num_clients": 5,
            "clients_per_round": 5,
            "feature_shift": 1.0,
            "client_test_fraction": 0.2,
            "model": "mlp",
            "hidden": 64,
            "norm": "batch",
            "local_epochs": 1,
            "batch_size": 32,
            "lr": 0.01,
            "momentum": 0.0,
        },
        arms={
            "fedavg": {"algorithm": "fedavg"},
            "fedprox": {"algorithm": "fedprox", "algorithm_params": {"mu": 0.01}},
            "fedbn": {"algorithm": "fedbn"},
        },
        comparisons=(
            Comparison("fedbn", "fedavg", "client_accuracy_mean"),
            Comparison("fedbn", "fedprox", "client_accuracy_mean"),
            Comparison("fedbn", "fedavg", "client_accuracy_worst10"),
        ),
        quick={"rounds": 30},
        full={"rounds": 50},
    )
)
