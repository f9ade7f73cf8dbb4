"""Ditto (T. Li, S. Hu, A. Beirami, V. Smith, "Ditto: Fair and Robust Federated Learning Through
Personalization", ICML 2021; listed in PFLlib's table of the lab deck seed).

Two models per client. The *global* model w is trained exactly as in FedAvg: the server sends
w^t, each selected client runs its local SGD steps on the cross-entropy, its update row is
aggregated (defended, recorded on the ledger) like FedAvg's and the server steps
``w^{t+1} = w^t + server_lr * delta``. Each client also keeps a *personal* model v_k in the
client-state store (table ``personal``, the trainable parameters) that solves

    min_v  F_k(v) + (lambda / 2) ||v - w^t||^2,

the proximal anchor being the round's global model w^t as received (Algorithm 1 of the paper),
not the client's drifting local copy of it. The personal model never leaves the client: it is not
part of the update row, so defenses, attacks on rows and the ledger see only the global model.
The per-client evaluation (``--client-test-fraction`` > 0) scores each client with its personal
model (``personal = "personal"``: the row's trainable parameters plus the global buffers); a
client that has never trained is scored with the global model. The global test accuracy
(``final_accuracy``) is the global model's, i.e. FedAvg's figure.

Choices and departures:

* **Same batches.** One local step updates both models on the same batch: the step's objective
  is ``CE(w) + CE(v) + (lambda/2)||v - w^t||^2``, whose gradient splits into the global model's
  FedAvg step and the personal model's proximal step (the terms share no variable). The paper
  states Algorithm 1 with s separate personal iterations; the authors' reference code
  (github.com/litian96/ditto, ``trainers_MTL/ditto.py``) in fact does what is done here: per
  local iteration, one personal step then one global step on the same mini-batch. The number of
  personal steps therefore equals the global model's (epochs x batches, partial work for
  stragglers included), and the reported training loss is the sum of both models' losses.
* **Optimizer.** Both models move by the shared client optimizer: plain SGD as in the paper
  when ``momentum`` and ``weight_decay`` are 0 (FedSentry's defaults); otherwise the personal
  model gets its own momentum buffer and the same weight decay.
* **Start.** A personal model starts from the global model of the first round its client is
  selected in (a never-trained client's store row is all zeros, detected per row; vmap-safe);
  the reference code starts every v_k from the initial global model w^0. The two coincide when
  all clients train in round 0 and differ otherwise only in the starting point.
* **lambda** defaults to 1, the value of the authors' run scripts (``--lam=1``); the paper tunes
  it per data set (its dynamic variant picks among 0.1, 1, 2 on validation data, not done here).
* **BatchNorm**: the personal model's forward (``Step.forward``) normalizes with batch
  statistics on a copy of the client's buffers, so the shared running statistics are the
  global model's alone; the personal table holds trainable parameters only, so a personal
  model is evaluated with the global running statistics.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from simulator.algorithms import register
from simulator.algorithms.base import Algorithm
from simulator.algorithms.params import non_negative
from simulator.training.step import Step

#: the client-state table holding each client's personal model
TABLE = "personal"


def split_like(vec: torch.Tensor, like: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``vec`` (one client's ``[P]`` vector) cut into tensors shaped as ``like``'s, in its
    order (the flat layout's); vmap-safe."""
    parts = torch.split(vec, [t.numel() for t in like.values()])
    return {k: p.reshape(t.shape) for (k, t), p in zip(like.items(), parts, strict=True)}


def masked_ce(logits: torch.Tensor, y: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy over the real rows of a batch (``mask`` 1) as the trainer computes
    it; 0 for a batch that is all padding."""
    ce = F.cross_entropy(logits, y, reduction="none")
    return (ce * mask).sum() / mask.sum().clamp_min(1.0)


def proximal(v: torch.Tensor, anchor: torch.Tensor, lam: float) -> torch.Tensor:
    """(lambda / 2) ||v - anchor||^2."""
    return 0.5 * lam * ((v - anchor) ** 2).sum()


@register
class Ditto(Algorithm):
    name = "ditto"
    params = {
        "lam": non_negative(
            "lambda: pull of the personal model to the round's global "
            "model (0 = local training only)",
            1.0,
        )
    }
    client_state = {TABLE: "params"}
    client_trainable = (TABLE,)
    personal = TABLE

    def trainable_start(
        self, name: str, stored: torch.Tensor, global_flat: torch.Tensor, data: Any = None
    ) -> torch.Tensor:
        """The stored personal model, or the round's global model for a client that has never
        trained (an all-zero row)."""
        return torch.where((stored == 0).all(), global_flat, stored)

    def client_loss(self, s: Step) -> torch.Tensor:
        """FedAvg's cross-entropy of the global model plus the personal model's proximal
        objective on the same batch: ``CE(w) + CE(v) + (lambda/2)||v - w^t||^2``."""
        v = s.aux[TABLE]
        _, logits = s.forward(split_like(v, s.params), s.x)
        return s.ce + masked_ce(logits, s.y, s.mask) + proximal(v, s.global_flat, self.p["lam"])
