"""MOON (Li, He, Song, CVPR 2021) under Dirichlet(0.5) and Dirichlet(0.1) label skew on mnist5k.

The notes' reproduction case R3: 10 parties, all of them every round, label skew by
Dirichlet(beta) per class, an MLP (784-64-64) with MOON's projection head (64-64-256, the
classifier on the projection), E = 5, batch 64, SGD lr 0.01 with momentum 0.9 and weight decay
1e-5 (the reference code's optimizer), tau = 0.5 and mu = 1 (the reference code's defaults; the
paper tunes mu per dataset, 5 on CIFAR-10). Quick runs 20 rounds, full runs 30 (the notes:
20-30). Nothing here was tuned on a result.

Arms per beta: ``fedavg`` (the plain MLP), ``fedavg-head`` (FedAvg on MOON's model: MOON with mu
= 0: the reference code trains its FedAvg baseline on the model with the projection head too)
and ``moon``. The seed predicts MOON above FedAvg by ~2-3 points and FedAvg's final
accuracy reached in 1.8-3.7x fewer rounds (``rounds_to_baseline``: the first round the MOON run
reaches the FedAvg run's final accuracy of the same seed; FedAvg's own value is its first round
at that accuracy, at most its last round).

Every run writes a checkpoint after its last round (``checkpoint_every`` = rounds) so that the
``fedfm`` case can score feature silhouettes; the ``fedfm`` case shares the Dirichlet(0.5)
``fedavg`` and ``moon`` runs with this one (same configs).
"""

from __future__ import annotations

from typing import Any

from benchmarks.heterogeneity_study.cases.base import CASES, Case, Comparison

#: the local-training protocol shared with the ``fedfm`` case (the notes' R3 and R4)
PROTOCOL: dict[str, Any] = {
    "dataset": "mnist5k",
    "num_clients": 10,
    "clients_per_round": 10,
    "model": "mlp",
    "hidden": 64,
    "local_epochs": 5,
    "batch_size": 64,
    "lr": 0.01,
    "momentum": 0.9,
    "weight_decay": 1e-5,
}
QUICK: dict[str, Any] = {"rounds": 20, "checkpoint_every": 20}
FULL: dict[str, Any] = {"rounds": 30, "checkpoint_every": 30}

#: MOON's arm (mu, tau, out_dim at their defaults) and FedAvg's, shared with ``fedfm``
MOON_ARM: dict[str, Any] = {"algorithm": "moon", "algorithm_params": {"mu": 1.0}}
FEDAVG_ARM: dict[str, Any] = {"algorithm": "fedavg"}
BETAS = (0.5, 0.1)


def dirichlet(beta: float) -> dict[str, Any]:
    """The partition overrides of Dirichlet(beta) label skew."""
    return {"partition": "dirichlet", "dirichlet_alpha": beta}


def _arms() -> dict[str, dict[str, Any]]:
    arms: dict[str, dict[str, Any]] = {}
    for b in BETAS:
        part = dirichlet(b)
        arms[f"fedavg-b{b}"] = {**FEDAVG_ARM, **part}
        arms[f"fedavg-head-b{b}"] = {"algorithm": "moon", "algorithm_params": {"mu": 0.0}, **part}
        arms[f"moon-b{b}"] = {**MOON_ARM, **part}
    return arms


def _comparisons() -> tuple[Comparison, ...]:
    out: list[Comparison] = []
    for b in BETAS:
        m = f"moon-b{b}"
        out += [
            Comparison(m, f"fedavg-b{b}"),
            Comparison(m, f"fedavg-head-b{b}"),
            Comparison(m, f"fedavg-b{b}", "rounds_to_baseline", "lower"),
        ]
    return tuple(out)


CASE = CASES.register(
    Case(
        name="moon",
        claim="MOON ends above FedAvg under Dirichlet(0.5) and (0.1) label skew, and reaches "
        "FedAvg's final accuracy in fewer rounds",
        base=PROTOCOL,
        arms=_arms(),
        comparisons=_comparisons(),
        quick=QUICK,
        full=FULL,
    )
)
