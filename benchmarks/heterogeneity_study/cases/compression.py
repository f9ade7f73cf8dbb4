"""Masked compression at 25% (the lab deck's upload/download masks, most likely pFedEff) against
FedAvg on mnist5k, IID and Dirichlet(0.5).

The seed (deck lines 1348-1534; notes methods-ktpfl-fedma-fedala-fedvb-siren.md section 5)
claims about 94% less communication for under 6 points of accuracy: pFedEff-25's volume is
0.0596 of FedAvg's on IID MNIST, its worst drop 5.94 points (FMNIST DIR75), and it says the
upload/download (importance) masks keep the accuracy where pruning masks do not. The notes'
reproduction: MNIST-5000, 10 clients, IID and Dirichlet(0.5), 30 rounds; FedAvg against top-25%
magnitude and top-25% ``|g * w|`` masks on upload and download (``--compression mask``,
:mod:`simulator.compression.mask`). Pass: upload volume <= 0.07 of FedAvg's with a drop of at
most 6 points, and the importance mask's drop no larger than the magnitude mask's.

The comparisons carry the claim's thresholds as margins (:class:`Comparison`): each mask
against FedAvg on the upload volume (``upload_volume``: the bytes uploaded over the same
uploads' dense bytes, 1 for FedAvg, so the mask's value is its fraction of FedAvg's), lower by
at least 0.93 (a volume <= 0.07); each mask against FedAvg on the final accuracy, higher by at
least -0.06 (at most 6 points lost); and the ``|g * w|`` mask against the magnitude mask ("no
worse" checked as "ahead").

What to expect of the volume: a 25% mask sends a quarter of the entries, and with their indices
(a bitmap, the cheapest encoding at this rate) 0.28125 of the dense bytes. The seed's 0.0596 is
``0.25 ** 2``: two nested masks (see the docstring of :mod:`simulator.compression.mask`), and
counted in entries; no single 25% transfer mask reaches 0.07.

Setting: the MLP (784-64-64-10) of ``_shared.DIRICHLET_MNIST5K`` (B = 64, plain SGD lr 0.1), all
10 clients every round, with one local epoch (the seed does not give E; one keeps the full run of
6 arms x 5 seeds within minutes on 2 cores). Full: 30 rounds (the notes'); quick: 15.
"""

from typing import Any

from benchmarks.heterogeneity_study.cases._shared import DIRICHLET_MNIST5K
from benchmarks.heterogeneity_study.cases.base import CASES, Case, Comparison

PARTITIONS: dict[str, dict[str, Any]] = {
    "iid": {"partition": "iid"},
    "dir0.5": {"partition": "dirichlet", "dirichlet_alpha": 0.5},
}
MASKS: dict[str, dict[str, Any]] = {
    "fedavg": {},
    "mask-magnitude": {
        "compression": "mask",
        "compression_params": {"rate": 0.25, "importance": "magnitude", "direction": "both"},
    },
    "mask-gw": {
        "compression": "mask",
        "compression_params": {"rate": 0.25, "importance": "gw", "direction": "both"},
    },
}


def _arms() -> dict[str, dict[str, Any]]:
    return {
        f"{m}-{p}": {"algorithm": "fedavg", **part, **mask}
        for p, part in PARTITIONS.items()
        for m, mask in MASKS.items()
    }


def _comparisons() -> tuple[Comparison, ...]:
    out: list[Comparison] = []
    for p in PARTITIONS:
        # volume <= 0.07 of FedAvg's (whose volume is 1): FedAvg's minus the mask's >= 0.93
        out.append(Comparison(f"mask-magnitude-{p}", f"fedavg-{p}", "upload_volume", "lower", 0.93))
        for m in ("mask-magnitude", "mask-gw"):  # at most 6 points lost
            out.append(Comparison(f"{m}-{p}", f"fedavg-{p}", "final_accuracy", "higher", -0.06))
        out.append(Comparison(f"mask-gw-{p}", f"mask-magnitude-{p}", "final_accuracy", "higher"))
    return tuple(out)


CASE = CASES.register(
    Case(
        name="compression",
        claim="top-25% upload/download masks: upload volume <= 0.07 of FedAvg's with at most 6 "
        "points lost; |g*w| masks no worse than magnitude masks",
        base={**DIRICHLET_MNIST5K, "local_epochs": 1},
        arms=_arms(),
        comparisons=_comparisons(),
        quick={"rounds": 15},
        full={"rounds": 30},
    )
)
