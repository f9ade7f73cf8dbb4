"""FedUFO (Zhang et al., ICCV 2021; seed fedufo.txt) under pathological label skew.

The notes' reproduction case R2 shrunk to seconds a run: the 5,000 MNIST digits, 100 clients
holding 2 label-sorted shards each (about 40 rows, 2 classes), 10% participation (K_c = 10), 20%
of each client's rows kept as its local test split; the paper's optimizer (SGD lr 0.01, momentum
0.9, weight decay 2e-4, B = 10) and lambda = 3. Full runs use the paper's MNIST 2NN width (200)
and E = 10; quick runs a 64-wide MLP and E = 5 (the notes' fallback). Both run 30 rounds, stage
one (UAD) for 18 and stage two (all losses) for 12: the notes' 60/40 split (the paper does not
give one). Arms as in the notes: FedAvg; FedUAD (stage one only); FedUFO with all losses,
without and with dynamic sampling (the paper's headline FedUFO, Tables 1-2). Nothing was tuned
on a result.

The seed predicts (MNIST, Tables 1-2, 4): FedUFO +2.4 points of accuracy over FedAvg, nearly all
of it from UAD alone; the per-client accuracy spread down by about a third (P_std 2.81 -> 1.87);
the worst clients up about 3 points (P_w 86.8 -> 89.7). Here P_std is
``client_accuracy_std`` and P_w is read as ``client_accuracy_worst10`` (the lowest 10% of the
clients' local test accuracies, under the global model).
"""

from benchmarks.heterogeneity_study.cases.base import CASES, Case, Comparison

_ALL = {"uad": 1.0, "cgr": 1.0, "lam": 3.0, "stage_two": 18}

CASE = CASES.register(
    Case(
        name="fedufo",
        claim="FedUFO beats FedAvg under 2 pathological shards per client and 10% participation: "
        "higher accuracy, smaller spread and higher worst-client accuracy",
        base={
            "dataset": "mnist5k",
            "partition": "shards",
            "classes_per_client": 2,
            "num_clients": 100,
            "clients_per_round": 10,
            "client_test_fraction": 0.2,
            "model": "mlp",
            "batch_size": 10,
            "lr": 0.01,
            "momentum": 0.9,
            "weight_decay": 0.0002,
        },
        arms={
            "fedavg": {"algorithm": "fedavg"},
            "feduad": {"algorithm": "fedufo", "algorithm_params": {**_ALL, "stage_two": 1_000_000}},
            "fedufo-nods": {"algorithm": "fedufo", "algorithm_params": _ALL},
            "fedufo": {
                "algorithm": "fedufo",
                "algorithm_params": {**_ALL, "dynamic_sampling": True},
            },
        },
        comparisons=(
            Comparison("fedufo", "fedavg", "final_accuracy"),
            Comparison("fedufo", "fedavg", "client_accuracy_std", "lower"),
            Comparison("fedufo", "fedavg", "client_accuracy_worst10"),
            Comparison("feduad", "fedavg", "final_accuracy"),
            Comparison("fedufo-nods", "fedavg", "final_accuracy"),
        ),
        quick={"rounds": 30, "hidden": 64, "local_epochs": 5},
        full={"rounds": 30, "hidden": 200, "local_epochs": 10},
    )
)
