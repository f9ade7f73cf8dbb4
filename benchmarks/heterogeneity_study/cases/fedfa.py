"""FedFA (Zhou & Konukoglu, ICLR 2023) under feature shift with small clients.

The notes' reproduction case R5, on the 8x8 digits so that each client is small: 5 clients with
IID labels and their own fixed input transform (``feature_shift`` 1.0: contrast, brightness,
noise and a small translation, seeded per client), about 287 rows each of which 20% are the
client's local test split (~230 training images a client: the notes ask for 150-300), all
clients every round. Model: the CNN with BatchNorm (two conv stages, 16 and 32 channels, an FFA
layer after each; 64-unit representation). Local training as the notes: E = 1, batch 32, plain
SGD lr 0.01; FFA p = 0.5, alpha = 0.99 (Algorithm 2's defaults), FedFA-R's std 0.5. Quick runs
40 rounds (the notes: 40-60), full runs 200 (after 40 rounds at lr 0.01 every arm is
still near 0.6). Nothing here was tuned on a result.

The metric is the paper's: the global model's accuracy averaged over the clients' own (shifted)
test splits (``client_accuracy_mean``). The seed predicts FedFA > FedFA-C > FedAvg ~ FedFA-R
(Table 5: +4.6 / +3.7 / +3.0 for FedFA over FedAvg, about +1 for FedFA-C, ~0 or below for
FedFA-R); the comparisons check the three strict inequalities and FedFA against FedFA-R.

Why FedFA-R beats FedFA here (measured on seeds 0-2 at full size; the algorithm was checked
against the paper's Eq. 2-9 and Algorithms 1-2 and departs in none of them): FedFA-R draws every
channel's statistics with the fixed std 0.5, FedFA with ``sqrt((gamma + 1) var_B)``, which on
the final models averages 0.19 (layer 1) and 0.24-0.31 (layer 2) over channels: FedFA-R's noise
is 2-2.5 times larger. With the std matched to FedFA's mean range (FedFA-R with ``lam`` 0.24)
the reversal vanishes: 0.809 / 0.802 / 0.869 against FedFA's 0.802 / 0.799 / 0.869 (FedFA-R at
0.5: 0.812 / 0.851 / 0.893; at 1.0: 0.757 / 0.841 / 0.875). So on this data the gain is the
amount of noise, not its per-channel, federation-aware shape. The gammas carry little signal
here: they correlate with the gammas of the clients' actual channel means from -0.67 to 0.94
(mean 0.11) over the 3 seeds, 2 layers and 2 statistics. BatchNorm in training mode removes
most of the clients' shift before the FFA layers (their channel means differ by a std of
0.01-0.08 across clients against a within-batch spread of 0.13-0.22), and the momentum
statistics, restarted every round with alpha = 0.99 (Algorithm 1, line 3) and ~4 updates a
round (~8 steps, p = 0.5), move only 1 - 0.99^4 = 3.9% of the way from (0, 1) to the batch
statistics, so how often each client's coins fired weighs on their spread across clients.
"""

from __future__ import annotations

from benchmarks.heterogeneity_study.cases.base import CASES, Case, Comparison

CASE = CASES.register(
    Case(
        name="fedfa",
        claim="FedFA > FedFA-C > FedAvg ~ FedFA-R on the mean per-client accuracy under feature "
        "shift with small clients",
        base={
            "dataset": "digits",
            "partition": "iid",
            "num_clients": 5,
            "clients_per_round": 5,
            "feature_shift": 1.0,
            "client_test_fraction": 0.2,
            "model": "cnn",
            "hidden": 64,
            "norm": "batch",
            "local_epochs": 1,
            "batch_size": 32,
            "lr": 0.01,
            "momentum": 0.0,
        },
        arms={
            "fedavg": {"algorithm": "fedavg"},
            "fedfa": {"algorithm": "fedfa"},
            "fedfa-c": {"algorithm": "fedfa", "algorithm_params": {"variant": "C"}},
            "fedfa-r": {"algorithm": "fedfa", "algorithm_params": {"variant": "R"}},
        },
        comparisons=(
            Comparison("fedfa", "fedavg", "client_accuracy_mean"),
            Comparison("fedfa", "fedfa-c", "client_accuracy_mean"),
            Comparison("fedfa-c", "fedavg", "client_accuracy_mean"),
            Comparison("fedfa", "fedfa-r", "client_accuracy_mean"),
        ),
        quick={"rounds": 40},
        full={"rounds": 200},
    )
)
