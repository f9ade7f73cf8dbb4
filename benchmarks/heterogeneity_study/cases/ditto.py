"""Ditto (Li, Hu, Beirami, Smith, ICML 2021; in PFLlib's table of the lab deck seed) under
pathological label skew: each client scored on its own local test split.

PFLlib's pathological setting shrunk to seconds a run: the 5,000 MNIST digits cut into
label-sorted shards, 2 classes per client; PFLlib's command-line defaults for the rest (20
clients, all of them every round, batch 10, a 75/25 per-client train/test split: 25% of each
client's rows are its local test split; the seed lists only PFLlib's results table, these
defaults are from PFLlib itself); E = 1, a 64-wide MLP, plain SGD with lr 0.05 and lambda = 1
(the Ditto authors' run scripts: ``--learning_rate=0.05 --lam=1``, plain SGD).
Quick runs take 20 rounds, full runs 50. Nothing was tuned on a result.

FedAvg is scored with the global model on every client's local test split; Ditto with each
client's personal model (``Algorithm.personal``), its global model being FedAvg's. The claim
(the issue's; the deck's Table 2, PFLlib's pathological setting: Ditto 99.81% on
MNIST against FedAvg's 97.93%): Ditto's mean per-client accuracy is higher. The
paper's fairness claim (a more uniform accuracy across clients) is the second comparison: a
lower standard deviation of the clients' accuracies.
"""

from benchmarks.heterogeneity_study.cases._shared import PATHOLOGICAL_MNIST5K
from benchmarks.heterogeneity_study.cases.base import CASES, Case, Comparison

CASE = CASES.register(
    Case(
        name="ditto",
        claim="Ditto's personal models beat FedAvg's global model on each client's local test "
        "split under 2 pathological shards per client, and more uniformly",
        base=PATHOLOGICAL_MNIST5K,
        arms={
            "fedavg": {"algorithm": "fedavg"},
            "ditto": {"algorithm": "ditto", "algorithm_params": {"lam": 1.0}},
        },
        comparisons=(
            Comparison("ditto", "fedavg", "client_accuracy_mean"),
            Comparison("ditto", "fedavg", "client_accuracy_std", "lower"),
        ),
        quick={"rounds": 20},
        full={"rounds": 50},
    )
)
