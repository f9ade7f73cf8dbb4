"""``mask``: send only the most important share of each transfer (the lab deck's upload and
download masks).

Source: the FL lab deck, "联邦学习效率-模型压缩" (seeds/fl-lab-deck-pfllib-siren-sageflow-
flchain-scheduler.txt, lines 1348-1534; notes/methods-ktpfl-fedma-fedala-fedvb-siren.md
section 5, most likely pFedEff): importance scores ``H(w) = |w|`` and ``I(w) = |dL/dw * w|``
(the first-order loss change of zeroing ``w``), an upload mask ``grad_i * M_i^u`` and a download
mask ``(sum_j k_j grad_j^u) * M_i^d``.

Parameters (``--compression mask --compression-params KEY=VALUE``):

* ``rate`` in (0, 1]: the share of a transfer's entries that travel, ``k = ceil(rate * n)``;
* ``importance``: ``magnitude`` ranks entries by ``|delta|``; ``gw`` by ``|g * w|``;
* ``direction``: ``up`` (client updates), ``down`` (the server's model) or ``both``.

Upload. Client ``i``'s update row ``delta_i`` (its trained model minus the global model ``w_g``
it started from) keeps its ``k_i`` most important entries, the rest zero; the defense, the ledger
and the server see that row. ``gw`` scores ``|g * w|`` with ``w = w_g + delta_i`` the client's
trained weights and ``g`` the gradient estimated by the update itself: local SGD gives
``delta_i = -eta * sum_t g_t``, so ``g ~ -delta_i / (eta * steps)`` is the client's gradient
averaged along its local trajectory, and the positive factor ``1 / (eta * steps)`` does not change
the ranking within a row. Why not a real gradient at the trained model: it needs one more pass
over the client's data inside training (a hook in the vectorized trainer) for a score that ranks
entries of a transfer, and at the end of local training the gradient is small and noisy while
the update is what the client actually sends. (Had the Taylor argument been applied to the
withheld change instead of to the weight, ``|g * delta|`` would be ``delta^2``, the magnitude
ranking again: the deck's ``|g * w|`` is what makes the two importances differ.)

Download. The server keeps one global model and sends clients the masked change of it: with
``w'`` the algorithm's server update of ``w_g``, the new global model is ``w_g + M * (w' - w_g)``
where ``M`` keeps the ``ceil(rate * S)`` most important entries of the change (``magnitude``:
``|w' - w_g|``; ``gw``: ``|(w' - w_g) * w'|``, the aggregate change standing for the gradient
as above). The server applies only what it sends, so every client that follows the downloads
holds exactly the server's model; the withheld part of the change is dropped (no error
feedback: the deck has none). A client that did not download the previous round's model needs
the whole model: the plan prices its download dense (:mod:`simulator.round.wire`).

Departures from the deck. The deck's ``M_i^d`` is per client and feeds a personalised
aggregation ``Theta_i <- l2 Theta_i + (1 - l2) M_i^p * sum_j k_j (...)`` (pFedEff): here the
download mask is one per round, applied to the one global model, because personalised models
are an algorithm's business (Ditto, FedALA, ...) and not a property of the wire; this option
composes with any algorithm (download masks with any that sends clients the model: FedMA's
one-shot modes and KT-pFL send none and refuse them; upload masks with any that uploads
updates). The deck says neither how the mask is drawn from the scores (we take the top ``k``,
ties broken by the lower index) nor how its indices travel
(:func:`simulator.compression.base.sparse_bytes`).

How the two masks compound. The seed's communication volume of pFedEff-75/50/25 is
.5625/.25/.0625 (.5277/.2398/.0596 on IID MNIST), i.e. ``rate ** 2``, where LotteryFL's one
pruning mask gives ``~ rate`` (.7350/.4876/.2377). Two masks of ``rate`` give ``rate ** 2`` only
when the second one is drawn inside the first on the same transfer (pFedEff's pruning masks
``M^r`` / ``M^P`` keep ``rate`` of the model, then the upload mask sends ``rate`` of that);
applied to different transfers, as here, each direction keeps ``rate`` of its entries and the
total is ``rate``, not ``rate ** 2``. Nesting the upload mask inside the previous download mask
instead would freeze the model: the aggregate then lies inside the previous download mask, so the
next download mask is that same set forever (a static pruning). The seed's volume also counts
entries: with indices on the wire no encoding of ``rate ** 2 = 0.0625`` of the entries costs
less than 0.094 of the dense bytes (a bitmap alone is 1/32 of them).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch.func import vmap

from simulator.compression import register
from simulator.compression.base import (
    Compressor,
    kept_entries,
    sparse_bytes,
    split_transfer,
)

IMPORTANCES = ("magnitude", "gw")
DIRECTIONS = ("up", "down", "both")


def importance(change: torch.Tensor, weights: torch.Tensor, kind: str) -> torch.Tensor:
    """Score of each entry of ``change`` (an update, or the change of the global model) whose
    model ends at ``weights``: ``|change|`` (``magnitude``) or ``|change * weights|`` (``gw``)."""
    return change.abs() if kind == "magnitude" else (change * weights).abs()


def keep_top(scores: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """Bool mask of the ``k`` highest ``scores`` of one vector, ties to the lower index.

    Tensor ops only (two stable sorts give each entry its rank), so it runs vmapped over
    clients: ``scores = [0.5, 2, 0.1, 1, 0.3]``, ``k = 2`` keeps entries 1 and 3.
    """
    order = torch.argsort(scores, descending=True, stable=True)
    rank = torch.argsort(order, stable=True)
    return rank < k


def mask_update(
    update: torch.Tensor, base: torch.Tensor, k: torch.Tensor, kind: str
) -> torch.Tensor:
    """One client's update as sent: its ``k`` most important entries (trained weights
    ``base + update``), the rest zero."""
    keep = keep_top(importance(update, base + update, kind), k)
    return torch.where(keep, update, torch.zeros_like(update))


@register("mask")
@dataclass(frozen=True)
class Mask(Compressor):
    """Top-``rate`` masks on uploads, downloads or both (module docstring)."""

    rate: float = 0.25
    importance: str = "magnitude"
    direction: str = "both"

    def __post_init__(self) -> None:
        r = self.rate
        if isinstance(r, bool) or not isinstance(r, int | float) or not 0.0 < r <= 1.0:
            raise ValueError(f"compression 'mask': rate must be in (0, 1], got {r!r}")
        if self.importance not in IMPORTANCES:
            raise ValueError(
                f"compression 'mask': importance must be one of {list(IMPORTANCES)}, "
                f"got {self.importance!r}"
            )
        if self.direction not in DIRECTIONS:
            raise ValueError(
                f"compression 'mask': direction must be one of {list(DIRECTIONS)}, "
                f"got {self.direction!r}"
            )

    @property
    def upload(self) -> bool:
        return self.direction in ("up", "both")

    @property
    def download(self) -> bool:
        return self.direction in ("down", "both")

    def upload_entries(self, dense_bytes: np.ndarray, row_size: int) -> np.ndarray:
        entries = split_transfer(dense_bytes, row_size)[0]
        return kept_entries(self.rate, entries) if self.upload else entries

    def upload_bytes(self, dense_bytes: np.ndarray, row_size: int) -> np.ndarray:
        if not self.upload:
            return np.asarray(dense_bytes, np.float64)
        entries, rest = split_transfer(dense_bytes, row_size)
        return sparse_bytes(kept_entries(self.rate, entries), entries) + rest

    def download_bytes(
        self, dense_bytes: np.ndarray, row_size: int, holds_previous: np.ndarray
    ) -> np.ndarray:
        dense = np.asarray(dense_bytes, np.float64)
        if not self.download:
            return dense
        entries, rest = split_transfer(dense, row_size)
        sparse = sparse_bytes(kept_entries(self.rate, entries), entries) + rest
        return np.where(np.asarray(holds_previous, bool), sparse, dense)

    def compress_rows(
        self, rows: torch.Tensor, base: torch.Tensor, keep: torch.Tensor
    ) -> torch.Tensor:
        if not self.upload or rows.shape[0] == 0:
            return rows
        kind = self.importance
        return vmap(lambda u, k: mask_update(u, base, k, kind))(rows, keep)

    def downlink(self, old: torch.Tensor, new: torch.Tensor) -> torch.Tensor:
        if not self.download:
            return new
        k = torch.tensor(int(kept_entries(self.rate, new.numel())))
        keep = keep_top(importance(new - old, new, self.importance), k)
        return torch.where(keep, new, old)
