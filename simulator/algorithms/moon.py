"""MOON (Q. Li, B. He, D. Song, "Model-Contrastive Federated Learning", CVPR 2021).

The model gets a projection head (:meth:`Moon.extend_model`): the feature extractor's output goes
through a 2-layer MLP, ``Linear(h, h) -> ReLU -> Linear(h, out_dim)``, and the classifier reads
the projection (the paper's "base encoder + projection head + output layer"); the
representation ``R_w(x)`` that MOON compares is the projection. Each client minimizes

    l = CE(F_w(x), y) + mu * l_con,
    l_con = -log( exp(sim(z, z_glob) / tau) / (exp(sim(z, z_glob) / tau)
                                               + exp(sim(z, z_prev) / tau)) ),

with ``sim`` the cosine similarity, ``z = R_w(x)`` (the client's current model), ``z_glob`` the
representation of the same batch under the round's global model (positive) and ``z_prev`` under
the client's model from the last round it trained (negative). Both are constants: no gradient
flows into them (the paper freezes both models). ``l_con`` is averaged over the real rows of the
batch. The previous model lives in the client-state store (table ``prev``, the trainable
parameters, with a one-entry flag ``trained``); the server is FedAvg's (the round's defended
aggregate). ``projection=false`` leaves the model as it is and contrasts the feature
extractor's output (the reference code's ``use_project_head = 0``): cheaper, not the paper's.

Choices where the seeds are silent (the reference code, QinbinLi/MOON, decides):

* defaults ``tau = 0.5``, ``mu = 1`` and ``out_dim = 256`` are the reference code's defaults
  (the paper tunes mu in {0.1, 1, 5, 10}: 5 on CIFAR-10, 1 on CIFAR-100 and Tiny-ImageNet);
* one previous model (the code's ``model_buffer_size = 1``);
* a client that has never trained (its ``trained`` flag still 0) takes the global model as
  its previous model. Then ``z_prev = z_glob`` and ``l_con`` is the constant ``log 2`` whose
  gradient is zero: exactly the reference code's first round, where the negative is absent and
  the loss (a softmax over the positive alone) is 0 with zero gradient. Only the reported
  training loss differs, by ``mu * log 2``. (With partial participation the reference code's
  pool holds, for a party never selected, its own randomly initialized network; here such a
  client, too, takes the global model);
* ``mu = 0`` skips the term: FedAvg on the same architecture (the reference code trains its
  FedAvg baseline on the model with the projection head too).

Departures: the aggregate is the defended aggregate (sample-weighted for the default ``fedavg``
defense, as in the paper); a client that takes no step keeps its stored previous model; the
optimizer is the shared client optimizer (the reference code: SGD, momentum 0.9, weight decay
1e-5). With BatchNorm in the model (``--norm batch``) the forwards of the global and previous
models run in training mode on a copy of the client's buffers: they normalize with the batch's
statistics and leave the client's running statistics alone (the reference code runs both models
in ``eval()`` mode, with their own running statistics). The default MLP has no BatchNorm.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from simulator.algorithms import register
from simulator.algorithms.base import Algorithm
from simulator.algorithms.params import Param, non_negative, positive
from simulator.config.fields import ConfigError
from simulator.training.lanes import ChunkLinear, lane_aligned
from simulator.training.step import Finish, Step


def model_contrastive_loss(
    z: torch.Tensor,
    z_glob: torch.Tensor,
    z_prev: torch.Tensor,
    tau: float,
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """MOON's ``l_con`` averaged over the real rows of a batch.

    Parameters
    ----------
    z, z_glob, z_prev : ``[B, D]`` representations under the local, global and previous model.
    tau : the temperature.
    mask : ``[B]`` 1 for real rows, 0 for padding (all rows when None).

    Returns
    -------
    The scalar ``mean_b -log softmax([cos(z, z_glob), cos(z, z_prev)] / tau)[0]``, i.e.
    ``softplus((cos(z, z_prev) - cos(z, z_glob)) / tau)`` per row.
    """
    pos = F.cosine_similarity(z, z_glob, dim=-1)
    neg = F.cosine_similarity(z, z_prev, dim=-1)
    # lane-aligned: the same bits whatever the number of clients mapped beside this one
    per_row = lane_aligned(F.softplus, (neg - pos) / tau)
    if mask is None:
        return per_row.mean()
    return (per_row * mask).sum() / mask.sum().clamp_min(1.0)


def unflatten_like(flat: torch.Tensor, like: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``flat`` cut into tensors shaped like ``like``'s, in its order (the flat layout's)."""
    out, at = {}, 0
    for name, t in like.items():
        n = t.numel()
        out[name] = flat[at : at + n].reshape(t.shape)
        at += n
    return out


def projection_head(model: Any, out_dim: int) -> Any:
    """``model`` with MOON's 2-layer projection head appended to its feature extractor and a
    new linear classifier on the projection (a ConfigError if the head is not linear)."""
    head = model.head
    if not isinstance(head, nn.Linear):
        raise ConfigError(
            f"algorithm moon: the model's classifier must be a Linear layer, "
            f"got {type(head).__name__}"
        )
    h = head.in_features
    layers = list(model.body) if isinstance(model.body, nn.Sequential) else [model.body]
    # appended to the same Sequential: the feature extractor's entries keep their names
    model.body = nn.Sequential(*layers, ChunkLinear(h, h), nn.ReLU(), ChunkLinear(h, out_dim))
    model.head = ChunkLinear(out_dim, head.out_features)
    return model


@register
class Moon(Algorithm):
    name = "moon"
    params = {
        "mu": non_negative(
            "weight mu of the model-contrastive loss (0 = FedAvg on the same model)", 1.0
        ),
        "tau": positive("temperature tau of the model-contrastive loss", 0.5),
        "out_dim": Param(
            256, "output dimension of the projection head", lambda v: v >= 1, ">= 1", int
        ),
        "projection": Param(
            True,
            "add the projection head (false: contrast the feature "
            "extractor's output, the reference code's use_project_head=0)",
            rule="true or false",
            kind=bool,
        ),
    }
    #: ``prev``: the client's model after the last round it trained; ``trained``: 1 once it has
    #: (a one-entry flag, so that no step scans the whole ``prev`` row)
    client_state = {"prev": "params", "trained": 1}

    def extend_model(self, model: Any, spec: Any) -> Any:
        if not self.p["projection"]:
            return model
        return projection_head(model, self.p["out_dim"])

    def client_loss(self, s: Step) -> torch.Tensor:
        if self.p["mu"] == 0:
            return s.ce
        z_glob, _ = s.forward(s.global_params, s.x)
        z_glob = z_glob.detach()
        prev = s.state.get("prev")
        if prev is None:  # no store (the server's own training on a root set)
            z_prev = z_glob
        else:
            z_prev, _ = s.forward(unflatten_like(prev, s.params), s.x)
            # a client that never trained contrasts with the global model (zero gradient)
            z_prev = torch.where(s.state["trained"] > 0, z_prev.detach(), z_glob)
        con = model_contrastive_loss(s.features, z_glob, z_prev, self.p["tau"], s.mask)
        return s.ce + self.p["mu"] * con

    def client_finish(self, f: Finish) -> dict[str, torch.Tensor]:
        if "prev" not in f.state:
            return {"prev": f.flat, "trained": torch.ones(1)}
        took = f.steps > 0
        return {
            "prev": torch.where(took, f.flat, f.state["prev"]),
            "trained": torch.where(took, torch.ones_like(f.state["trained"]), f.state["trained"]),
        }
