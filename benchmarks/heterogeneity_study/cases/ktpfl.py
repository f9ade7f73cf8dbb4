"""KT-pFL (Zhang et al., NeurIPS 2021; lab deck L571-734) with clients of three architectures:
the notes' reproduction case (methods-ktpfl-fedma-fedala-fedvb-siren.md, section 1), on the
suite's pathological MNIST regime.

The notes' setting on the 8x8 digits (10 clients, 2 classes each) saturates: at stop 30 every
arm reached 0.993 on 5 of 5 seeds, local training included, so no accuracy claim could be
judged there. The seed gives no regime; the paper trains on EMNIST, Fashion-MNIST and CIFAR-10
and its code (cugzj/KT-pFL) uses 20 clients. The case therefore moved, before any run of it, to
the setting the ditto, fedala and multibranch cases share (``_shared.PATHOLOGICAL_MNIST5K``:
the 5,000 MNIST digits, 20 clients with 2 label-sorted shards each, all of them every round,
a 75/25 per-client train/test split, E = 1, batch 10, plain SGD lr 0.05), where local
training scores ~0.95 (the multibranch case's fedavg-local arm), not 0.99. What the notes fix
is kept: a public unlabeled set of 500 images (``public_fraction`` 0.125 of the 4,000
training images), three architectures by client id mod 3, MLPs of hidden width 32, 64 and 128
(``--model-groups``), T = 3, lambda = 1, rho = 0.5, R = 1 distillation pass, KT-pFL's default
order (distill towards the target, then train locally) and eta_3 = 1. Quick runs take 10
rounds, full runs 20 (the notes'); every run writes a checkpoint after its last round, from
which the ``class_affinity`` score reads the final coefficients. Nothing was tuned on a result.

Arms: Local (no transfer: no distillation pass), FedMD (KT-pFL with c fixed at 1/N, the
cohort's mean prediction as every client's target) and KT-pFL. Claims (the notes'): KT-pFL's
mean per-client accuracy is at least FedMD's + 1 point and at least Local's, and the learned c
favours peers that share a class, in at least 80% of its columns. The comparison with FedMD carries
the 1-point margin; the 80% share is read from the ``class_affinity`` means (an absolute
threshold, not a difference between arms).

Measured at stop 31 (full, 5 seeds): KT-pFL 0.965 +- 0.012, FedMD 0.965 +- 0.012, Local
0.969 +- 0.010 (paired diffs +0.000 and -0.003: both accuracy claims contradicted), class
affinity 1.000 (reproduced). Why KT-pFL equals FedMD here: with rho = 0.5 the learned c leans
the right way but stays near 1/N (seed 1's final c: 0.047-0.066 against 1/N = 0.05), so each
client's target is the cohort's mean prediction within a few percent, FedMD's target.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmarks.heterogeneity_study.cases._shared import PATHOLOGICAL_MNIST5K
from benchmarks.heterogeneity_study.cases.base import CASES, Case, Comparison

PROTOCOL: dict[str, Any] = {
    **PATHOLOGICAL_MNIST5K,
    "public_fraction": 0.125,
    "model_groups": ["mlp:hidden=32", "mlp:hidden=64", "mlp:hidden=128"],
    "algorithm": "ktpfl",
}
KT: dict[str, Any] = {"temperature": 3.0, "lam": 1.0, "rho": 0.5, "passes": 1}


def class_affinity(run_dir: Path) -> float:
    """Share of the final cohort's clients n whose column of c gives the peers sharing a class
    with n a higher mean coefficient than the peers sharing none, by more than 1e-9 (float
    rounding of equal coefficients: FedMD's 1/N scores 0); n itself is left out, clients with
    no peer of one kind are not counted."""
    import numpy as np
    import torch

    from simulator.config.sections import load_config
    from simulator.run.federation import build_federation

    fed = build_federation(load_config(run_dir / "config.yaml"))
    server = torch.load(run_dir / "checkpoint.pt", weights_only=False)["server_state"]
    c, ids = server["c"].numpy(), server["c_ids"].numpy()
    classes = [set(np.unique(y).tolist()) for _, y in fed.arrays(fed.clients, ids)]
    favoured = []
    for n in range(len(ids)):
        peers = [m for m in range(len(ids)) if m != n]
        share = [m for m in peers if classes[m] & classes[n]]
        other = [m for m in peers if not classes[m] & classes[n]]
        if share and other:
            favoured.append(c[share, n].mean() > c[other, n].mean() + 1e-9)
    return float(np.mean(favoured)) if favoured else 0.0


CASE = CASES.register(
    Case(
        name="ktpfl",
        claim="KT-pFL's personal models beat FedMD's (by >= 1 point) and local training on "
        "each client's local test split, three MLP widths, 2 pathological shards per client "
        "on MNIST; its coefficients favour peers that share a class",
        base=PROTOCOL,
        arms={
            "local": {"algorithm_params": {**KT, "passes": 0}},
            "fedmd": {"algorithm_params": {**KT, "coefficients": "uniform"}},
            "ktpfl": {"algorithm_params": KT},
        },
        comparisons=(
            Comparison("ktpfl", "fedmd", "client_accuracy_mean", margin=0.01),
            Comparison("ktpfl", "local", "client_accuracy_mean"),
            Comparison("ktpfl", "fedmd", "class_affinity"),
        ),
        quick={"rounds": 10, "checkpoint_every": 10},
        full={"rounds": 20, "checkpoint_every": 20},
        scores={"class_affinity": class_affinity},
    )
)
