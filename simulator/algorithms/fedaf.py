"""FedAF: aggregation-free federated learning from condensed data (Y. Wang, H. Fu,
R. Kanagavelu, Q. Wei, Y. Liu, R. S. M. Goh, "An Aggregation-Free Federated Learning for
Tackling Data Heterogeneity", CVPR 2024, arXiv 2404.18962; seed deck
``seeds/fedaf-aggregation-free.txt``, notes ``notes/methods-fedaf-fedufo.md`` section 1). Its
condensation is distribution matching (DM: B. Zhao, H. Bilen, "Dataset Condensation with
Distribution Matching", WACV 2023), as in FedDM (Y. Xiong et al., CVPR 2023).

No model update leaves a client. Round t:

* **Clients** hold a condensed set S_k (``ipc`` images per class, the client-state table
  ``syn``) and move it by the loss ``L_DM + lambda_loc * L_CDC`` with the model frozen
  (``train_mask``: the sent all-zero ``frozen``). L_DM (:func:`~.fedaf_losses.dm_loss`) is
  ``sum_c ||mean_c psi(real batch) - mean_c psi(S_k)||^2`` over the classes in the batch,
  divided by the batch's mean ``||psi(x)||^2``; psi is the body (features) of the round's
  embedding network ``embed``. L_CDC (:func:`~.fedaf_losses.cdc_term`) is
  ``sum_c ||u_c - v_c||^2 / C`` over the classes the client holds: u_c the mean logits of
  S_k's class-c images, v_c the server's global class-wise mean logits of real data, both under
  the same model ``v_model`` (sent). A client then sends its row, ``condensed`` (S_k with the
  blocks of classes it lacks zeroed), and the extras ``logits`` (``[C, C]``, its class-wise mean
  logits of its real data under w_t) and ``counts`` (``[C]``).
* **The server** trains w_t on the union of the round's kept condensed sets (the held classes'
  blocks, labels by position; :func:`~.fedaf_losses.union`) with ``CE + lambda_glob * LGKM``,
  ``LGKM = mean_c 1/2 (KL(R_c || T_c) + KL(T_c || R_c))`` (:func:`~.fedaf_losses.lgkm`):
  ``R_c = softmax(v_c / tau)`` with v_c the count-weighted mean of the kept clients' class-c
  real-data logits (this round's uploads), ``T_c = softmax(mean of the model's logits on the
  batch's class-c condensed images / tau)``, over the classes in both. SGD with the model's
  ``--lr``, ``--momentum`` and ``--weight-decay``, batches of ``server_batch``,
  ``server_epochs`` epochs, shuffled by a seed of (experiment seed, round): deterministic. The
  clients of round t + 1 get these v_c with ``v_model`` = w_t (the model they were computed
  under) and the next embedding network: **model resampling** ``psi = gamma * w_{t+1} +
  (1 - gamma) * w~``, w~ a fresh initialisation of the model (seeded by the experiment seed
  and the round).

Choices where the sources are silent (and departures):

* **Initialisation**: real samples of each class, as DM does (its best setting): a client's
  first round starts S_k from ``ipc`` of its samples per class in its seeded first-epoch order
  (:func:`~.fedaf_losses.real_start`; fewer samples than ``ipc`` repeat, identical copies stay
  identical); later rounds continue from the stored S_k. Noise needs far more steps than a
  round gives. So a first upload is close to real samples: the deck's "visual privacy" is not
  a property of this choice.
* **Steps**: the condensation steps of a round are the trainer's local steps: ``--local-epochs``
  passes over the client's data in batches of ``--batch-size``, one DM step per real batch (DM
  samples one real batch per class per step; here a mixed batch, class means by one-hot).
* **DM's scale** (a departure): DM embeds with fresh random ConvNets whose instance norm makes
  the embedding's scale independent of the weights; here psi is mostly the server-trained
  model, whose weights (and so the raw DM step) grow round after round; the loss is divided by
  the real batch's mean squared embedding norm (detached), which makes the image step
  invariant to a rescaling of psi. Without it the images left the data range and the model
  degraded within 20 rounds on digits (largest pixel 4.2, weight norm 46 against 1.3 and 16).
* **CDC's model** (a departure): the paper's round has two exchanges (logits first, then
  condensation under one model); here one, so v_c of round t + 1 were computed under w_t and
  CDC evaluates S_k under w_t too (``v_model``, one more model on the download). Comparing
  against stale v_c under w_{t+1} fed back: images pushed toward the previous model's less
  confident logits, a growing model, accuracy falling from round 3 on. Round 0 has no CDC.
* **F (CDC)**: the external summary names a sliced Wasserstein distance; between the class
  means it is ``||u - v||^2 / C`` in expectation, used exactly.
* **Image optimizer**: SGD with learning rate ``lr_images x --lr``, momentum
  ``momentum_images`` (DM's 0.5), no weight decay. ``lr_images`` defaults to 1 (the model's
  step); at 10 (DM's 1.0 at our default ``--lr 0.1``) the CDC term drove digits images out of
  the data range within 20 rounds (chosen on the images' range and the training accuracy,
  not on the test split).
* **Resampling** applies to the DM embedding network only. ``gamma`` defaults to 0.9, the best
  of the deck's ablation (Table E: 66.97 vs 64.92 at 1.0). Round 0's embedding is w_0 itself
  (already a fresh initialisation). One w~ per round, shared by the round's clients (a seed on
  the wire; the simulator ships the vector).
* **Memory**: the server keeps no earlier rounds' condensed sets: it trains w_t (warm start) on
  this round's kept sets only, so the ledger's rows of a round re-derive its model.
* **tau** defaults to 1 (no source gives one); ``lambda_loc = lambda_glob = 0.5`` (the notes'
  suggested range 0.5-1; the deck gives none); ``ipc`` 10 (the notes' digits case; the paper's
  CIFAR default is 50); ``server_batch`` 10 (FedSentry's default ``--batch-size``) and
  ``server_epochs`` 10 (none given). The round's fedavg aggregate of rows is computed, unused.
* Models with batch statistics are refused: DM embeds a real batch and a condensed set apart.

Defenses and attacks: the rows are condensed images, not model updates, so rules that judge
updates (median, Krum, FLTrust, ...), model attacks (sign flips, scaling, ...) and
row-mixing round policies refuse to run, in one line naming why (``defense 'median':
algorithm 'fedaf' sends 'condensed', not model updates; ...``); ``--defense fedavg`` accepts
any rows (every row is kept). Data attacks apply: they poison the real data a client condenses
(and its logits and counts). The ledger records the rows, i.e. the condensed sets.

Bytes on the wire (:meth:`FedAF.wire_bytes`): upload ``4 * (n_held * (ipc * D + C) + C)`` (the
held classes' images and mean logits, and the counts), download ``4 * (2 P + C * C + C)`` (the
global model, ``v_model``, v and its per-class flags; ``4 * (P + C * C + C)`` with
``lambda_loc`` 0; the embedding network's seed is negligible).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from simulator.algorithms import register
from simulator.algorithms.base import Algorithm
from simulator.algorithms.exchange import Optimizer, ServerRound, WireInfo
from simulator.algorithms.fedaf_losses import (
    cdc_term,
    class_sums,
    dm_loss,
    real_start,
    soft_labels,
    split_as,
    union,
)
from simulator.algorithms.fedaf_server import resampled, train_on_union
from simulator.algorithms.params import Param
from simulator.config.fields import ConfigError
from simulator.training.flat import FlatLayout
from simulator.training.models import MaskedBatchNorm
from simulator.training.step import Finish, Step

#: the client-state table holding S_k, and the name of the row a client sends
TABLE, UPLOAD = "syn", "condensed"


def _int(help: str, default: int, low: int) -> Param:
    return Param(default, help, lambda v: v >= low, f">= {low}", int)


def _weight(help: str, default: float) -> Param:
    return Param(default, help, lambda v: v >= 0, ">= 0")


@register
class FedAF(Algorithm):
    name = "fedaf"
    params = {
        "ipc": _int("condensed images per class on each client", 10, 1),
        "lambda_loc": _weight("weight of the collaborative condensation term (CDC)", 0.5),
        "lambda_glob": _weight("weight of the server's LGKM term", 0.5),
        "tau": Param(1.0, "softmax temperature of LGKM's R and T", lambda v: v > 0, "> 0"),
        "gamma": Param(
            0.9,
            "model resampling: embed = gamma*w + (1-gamma)*fresh",
            lambda v: 0 <= v <= 1,
            "in [0, 1]",
        ),
        "server_epochs": _int("epochs of the server's training on the round's union", 10, 1),
        "server_batch": _int("batch size of the server's training", 10, 1),
        "lr_images": Param(
            1.0, "images' learning rate as a multiple of --lr", lambda v: v > 0, "> 0"
        ),
        "momentum_images": Param(
            0.5, "images' SGD momentum (DM's 0.5)", lambda v: 0 <= v < 1, "in [0, 1)"
        ),
    }
    client_state = {TABLE: "row"}
    client_trainable = (TABLE,)
    sends = ("frozen", "embed", "v", "v_have", "v_model")
    train_mask = "frozen"
    upload = UPLOAD
    reads_rows = True

    # -- sizes and the model ------------------------------------------------------------------
    def row_entries(self, layout: Any) -> int:
        """C * ipc * D: the condensed set (D: entries of one input)."""
        if not layout.input_shape or layout.num_classes < 1:
            raise ValueError("algorithm 'fedaf': the model's layout does not say its input shape")
        return layout.num_classes * self.p["ipc"] * int(np.prod(layout.input_shape))

    def extend_model(self, model: Any, spec: Any) -> Any:
        """The model unchanged; one refusing to run with batch statistics."""
        if any(isinstance(m, MaskedBatchNorm) for m in model.modules()):
            raise ConfigError(
                "model.norm: fedaf embeds real batches and condensed sets apart, which batch "
                "statistics break; valid: 'none'"
            )
        return model

    def optimizer(self) -> Optimizer:
        """The condensed images' SGD (the model is frozen on clients)."""
        return Optimizer(self.cfg.lr * self.p["lr_images"], self.p["momentum_images"], 0.0)

    # -- the client side ----------------------------------------------------------------------
    def trainable_start(
        self, name: str, stored: torch.Tensor, global_flat: torch.Tensor, data: Any = None
    ) -> torch.Tensor:
        """The stored S_k, or real samples of each class for a client without one."""
        if data is None:
            return stored
        x, y, m = data
        d = x[0, 0].numel()
        start = real_start(x, y, m, self.p["ipc"], stored.shape[-1] // (self.p["ipc"] * d))
        return torch.where((stored == 0).all(), start, stored)

    def client_loss(self, s: Step) -> torch.Tensor:
        """``L_DM + lambda_loc * L_CDC`` of the client's condensed set on its real batch."""
        ipc, c = self.p["ipc"], s.logits.shape[-1]
        syn = s.aux[TABLE].reshape(c * ipc, *s.x.shape[1:])
        embed = split_as(s.params, s.shared["embed"])
        real = s.features if self.p["gamma"] == 1.0 else s.forward(embed, s.x)[0]
        loss = dm_loss(real, s.y, s.mask, s.forward(embed, syn)[0], ipc)
        v = s.shared["v"]
        if self.p["lambda_loc"] == 0 or v.numel() == 0:  # no global logits yet (round 0)
            return loss
        held = (syn.reshape(c, -1).abs().sum(-1) > 0).to(v.dtype)
        _, logits = s.forward(split_as(s.params, s.shared["v_model"]), syn)
        return loss + self.p["lambda_loc"] * cdc_term(logits, v, held * s.shared["v_have"])

    def client_finish(self, f: Finish) -> dict[str, torch.Tensor]:
        """The row (S_k, the blocks of classes it lacks zeroed) and the extras: the class-wise
        mean logits of its real data under w_t and its class counts."""
        syn = f.aux[TABLE]
        x = f.x.reshape(-1, *f.x.shape[2:])
        _, logits = f.forward(f.split(f.global_flat), x)
        c = logits.shape[-1]
        means, counts = class_sums(logits, f.y.reshape(-1), f.mask.reshape(-1), c)
        held = (counts > 0).to(syn.dtype)
        row = (syn.reshape(c, -1) * held[:, None]).reshape(-1)
        return {UPLOAD: row, "logits": means, "counts": counts}

    # -- the server side ----------------------------------------------------------------------
    def init_server(self, global_flat: torch.Tensor, num_params: int) -> dict[str, torch.Tensor]:
        """No global logits yet; round 0 embeds with w_0; every model entry frozen."""
        return {
            "frozen": torch.zeros(num_params),
            "embed": global_flat[:num_params].clone(),
            "v": torch.zeros(0, 0),
            "v_have": torch.zeros(0),
            "v_model": global_flat[:num_params].clone(),
        }

    def server_update(self, r: ServerRound) -> torch.Tensor:
        """Train w_t on the round's kept condensed sets (CE + lambda_glob LGKM); the next
        round's v and resampled embedding network."""
        if r.model_spec is None:
            raise ValueError("algorithm 'fedaf': the server update needs the model (model_spec)")
        kept = torch.from_numpy(np.asarray(r.kept, dtype=bool))
        if r.rows is None or not bool(kept.any()):
            return r.global_flat
        model = r.model_spec.build(seed=0)  # a template: its weights are never read
        layout = FlatLayout(model)
        rows, ipc = r.rows[kept].float(), self.p["ipc"]
        if "counts" not in r.extras or "logits" not in r.extras:
            raise ValueError(
                "algorithm 'fedaf': the server update needs the clients' extras 'logits' and "
                f"'counts'; got {sorted(r.extras)}"
            )
        counts = r.extras["counts"][kept].float()
        v, have = soft_labels(r.extras["logits"][kept].float(), counts)
        x, y = union(rows, counts > 0, ipc, layout.input_shape)
        nxt = r.global_flat + train_on_union(r, self.cfg, self.p, model, layout, x, y, v, have)
        r.server["v"], r.server["v_have"] = v, have
        r.server["v_model"] = r.global_flat[: layout.num_params].clone()
        r.server["embed"] = resampled(r, nxt[: layout.num_params], self.p["gamma"])
        return nxt

    def wire_bytes(self, w: WireInfo) -> tuple[np.ndarray, np.ndarray]:
        """Upload: the held classes' condensed images and mean logits, and the class counts;
        download: the global model, the model v was computed under, v and its flags
        (float32)."""
        c = w.num_classes
        if w.row_size < c:
            raise ValueError("fedaf: WireInfo.row_size (C x ipc x D) is needed for its bytes")
        held = (np.asarray(w.label_counts()) > 0).sum(1).astype(np.float64)
        per_class = w.row_size // c  # ipc * D: the row holds C such blocks
        model = sum(s.stop - s.start for s in w.slices.values())
        models = 2 if self.p["lambda_loc"] > 0 else 1  # w_t and v_model
        up = 4.0 * (held * (per_class + c) + c)
        down = np.full(len(w.client_ids), 4.0 * (models * model + c * c + c))
        return up, down
